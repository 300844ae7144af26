// The cycle's construction, its process sets and the drain of the submission queue
// (cycle.h). Holder of the cycle lock only.
#include <algorithm>
#include <numeric>

#include "common/logging.h"
#include "engine/cycle.h"

namespace perseus::engine {

Cycle::Cycle(Parts parts, Listener listener)
    : topology_(std::move(parts.topology)),
      transport_(parts.transport),
      arena_(parts.arena),
      params_(std::move(parts.params)),
      submissions_(*parts.submissions),
      posted_(*parts.posted),
      gpu_completion_(*parts.gpu_completion),
      gpu_(parts.gpu),
      cpu_executor_(std::move(parts.cpu_executor)),
      gpu_executor_(std::move(parts.gpu_executor)),
      listener_(std::move(listener)) {
  PERSEUS_CHECK(transport_ != nullptr, "engine without a transport");
  const int rank = transport_->rank();
  const int size = transport_->size();
  std::vector<int> all(size);
  std::iota(all.begin(), all.end(), 0);
  // Without rendezvous information (tests, one host) every rank is local.
  std::vector<int> local = topology_.local_ranks.empty() ? all : topology_.local_ranks;
  std::vector<int> cross =
      topology_.cross_ranks.empty() ? std::vector<int>{rank} : topology_.cross_ranks;
  const size_t capacity = static_cast<size_t>(std::max<int64_t>(params_.cache_capacity, 0));
  auto add = [&](int32_t id, int group, std::vector<int> members) {
    auto set = std::make_unique<ProcessSet>(id, group, members, rank, capacity);
    if (set->member()) set->comm = makeComm(*set);
    if (listener_.set_added) listener_.set_added(ProcessSetInfo{id, members, set->rank});
    sets_[group] = std::move(set);
  };
  add(kGlobalSetId, kGlobalGroup, all);
  add(kLocalSetId, kLocalGroup, local);
  add(kCrossSetId, kCrossGroup, cross);
  // DYNAMIC (Horovod's value) arms the timeline for Engine::startTimeline() only.
  if (!params_.timeline.empty() && params_.timeline != "DYNAMIC") {
    timeline_ =
        std::make_unique<Timeline>(Timeline::pathForRank(params_.timeline, rank, size), rank);
    mark_cycles_ = params_.timeline_mark_cycles;
  }
}

std::unique_ptr<collectives::Communicator> Cycle::makeComm(const ProcessSet& set) {
  return std::make_unique<collectives::Communicator>(transport_, arena_, set.members, set.group_id,
                                                     params_);
}

bool Cycle::drain() {
  if (!submissions_.hasQueued()) return false;
  std::vector<std::unique_ptr<Entry>> batch = submissions_.drain();
  auto failQueued = [this](Entry* raw, StatusCode code, const std::string& message) {
    submissions_.release(raw->request.process_set, raw->request.name);
    raw->handle->complete(code, message);
  };
  for (auto& e : batch) {
    Entry* raw = e.get();
    // The set exists: submit() checked it, and sets are removed only by the cycle, which
    // fails a removed set's queue entries below.
    ProcessSet* set = setById(raw->request.process_set);
    if (set == nullptr) {
      failQueued(
          raw, StatusCode::kInvalidArgument,
          PERSEUS_STR(opTypeName(raw->request.op) << " '" << raw->request.name << "': process set "
                                                  << raw->request.process_set << " was removed"));
      continue;
    }
    if (std::optional<std::string> failure = takeConflict(*set, raw->request)) {
      failQueued(raw, StatusCode::kMismatch, *failure);
      continue;
    }
    set->entries[raw->request.name] = std::move(e);
    set->fresh.push_back(raw);
  }
  return !batch.empty();
}

bool Cycle::pending() const {
  for (auto& [group, set] : sets_) {
    if (set->hasWork()) return true;
  }
  return false;
}

ProcessSet* Cycle::setById(int32_t id) {
  for (auto& [group, set] : sets_) {
    if (set->id == id) return set.get();
  }
  return nullptr;
}

std::unique_ptr<Timeline> Cycle::swapTimeline(std::unique_ptr<Timeline> timeline,
                                              bool mark_cycles) {
  std::swap(timeline_, timeline);
  mark_cycles_ = timeline_ != nullptr && mark_cycles;
  return timeline;
}

Cycle::Stats Cycle::stats() const {
  constexpr auto r = std::memory_order_relaxed;
  Stats s;
  s.cycles = cycles_.load(r);
  s.control_exchanges = control_exchanges_.load(r);
  s.control_bytes = control_bytes_.load(r);
  s.coordinator_rounds = coordinator_rounds_.load(r);
  s.cached_responses = cached_responses_.load(r);
  s.coordinated_responses = coordinated_responses_.load(r);
  s.negotiation_ns = negotiation_ns_.load(r);
  return s;
}

}  // namespace perseus::engine
