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
  if (!in_flight_.insert({e->request.process_set, e->request.name}).second)
    return Admission::kDuplicate;
  if (!queue) return Admission::kClaimed;
  pushLocked(e);
  return Admission::kQueued;
}

Submissions::Admission Submissions::queue(std::unique_ptr<Entry>& e, bool claim, Stop* stop) {
  std::lock_guard<std::mutex> lock(mu_);
  Key key{e->request.process_set, e->request.name};
  if (stop_.stopped()) {
    *stop = stop_;
    if (!claim) in_flight_.erase(key);
    return Admission::kStopped;
  }
  // Another thread submitted the name while the post fell back: the later one fails.
  if (claim && !in_flight_.insert(std::move(key)).second) return Admission::kDuplicate;
  pushLocked(e);
  return Admission::kQueued;
}

void Submissions::release(int32_t set, const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  in_flight_.erase({set, name});
}

void Submissions::release(int32_t set, Entry* const* done, size_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < n; ++i) in_flight_.erase({set, done[i]->request.name});
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
