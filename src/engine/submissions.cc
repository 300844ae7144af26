#include "engine/submissions.h"

namespace perseus::engine {

void Submissions::pushLocked(std::unique_ptr<Entry>& e) {
  queue_.push_back(std::move(e));
  queued_.store(true);
}

Submissions::Admission Submissions::submit(std::unique_ptr<Entry>& e, bool queue, Stop* stop) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stop_.stopped()) {
    *stop = stop_;
    return Admission::kStopped;
  }
  if (!claimLocked(e->request.process_set, e->request.name)) return Admission::kDuplicate;
  if (!queue) return Admission::kClaimed;
  pushLocked(e);
  return Admission::kQueued;
}

Submissions::Admission Submissions::queue(std::unique_ptr<Entry>& e, bool claim, Stop* stop) {
  std::lock_guard<std::mutex> lock(mu_);
  const int32_t set = e->request.process_set;
  if (stop_.stopped()) {
    *stop = stop_;
    if (!claim) {
      auto it = in_flight_.find(set);
      if (it != in_flight_.end()) releaseLocked(it->second, e->request.name);
    }
    return Admission::kStopped;
  }
  // Another thread submitted the name while the post fell back: the later one fails.
  if (claim && !claimLocked(set, e->request.name)) return Admission::kDuplicate;
  pushLocked(e);
  return Admission::kQueued;
}

void Submissions::release(int32_t set, const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = in_flight_.find(set);
  if (it != in_flight_.end()) releaseLocked(it->second, name);
}

void Submissions::release(int32_t set, Entry* const* done, size_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = in_flight_.find(set);
  if (it == in_flight_.end()) return;
  for (size_t i = 0; i < n; ++i) releaseLocked(it->second, done[i]->request.name);
}

void Submissions::forgetSet(int32_t set) {
  std::lock_guard<std::mutex> lock(mu_);
  in_flight_.erase(set);
}

void Submissions::releaseLocked(NameSet& names, const std::string& name) {
  NameSet::node_type node = names.extract(name);
  if (!node.empty() && spare_names_.size() < kKeptNames) spare_names_.push_back(std::move(node));
}

bool Submissions::claimLocked(int32_t set, const std::string& name) {
  NameSet& names = in_flight_[set];
  if (spare_names_.empty()) return names.insert(name).second;
  NameSet::node_type node = std::move(spare_names_.back());
  spare_names_.pop_back();
  node.value().assign(name);
  NameSet::insert_return_type inserted = names.insert(std::move(node));
  if (!inserted.inserted) spare_names_.push_back(std::move(inserted.node));
  return inserted.inserted;
}

std::vector<std::unique_ptr<Entry>> Submissions::drain(std::vector<std::unique_ptr<Entry>> spare) {
  spare.clear();
  std::vector<std::unique_ptr<Entry>> batch = std::move(spare);
  std::lock_guard<std::mutex> lock(mu_);
  batch.swap(queue_);
  queued_.store(false, std::memory_order_relaxed);
  return batch;
}

std::vector<std::unique_ptr<Entry>> Submissions::stop(StatusCode code, const std::string& message) {
  std::vector<std::unique_ptr<Entry>> queued;
  std::lock_guard<std::mutex> lock(mu_);
  if (!stop_.stopped()) stop_ = Stop{code, message};
  queued.swap(queue_);
  queued_.store(false, std::memory_order_relaxed);
  in_flight_.clear();
  return queued;
}

Submissions::Stop Submissions::stopCause() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stop_;
}

}  // namespace perseus::engine
