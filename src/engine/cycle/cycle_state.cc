// The cycle's construction and the drain of the submission queue into the process sets
// (cycle.h). Holder of the cycle lock only.
#include "common/logging.h"
#include "engine/cycle/cycle.h"

namespace perseus::engine {

Cycle::Cycle(Parts parts, Listener listener)
    : arena_(parts.arena),
      rank_(parts.topology.rank),
      hostnames_(parts.topology.hostnames),
      params_(std::move(parts.params)),
      submissions_(*parts.submissions),
      fast_path_(*parts.fast_path),
      gpu_completion_(*parts.gpu_completion),
      gpu_(parts.gpu),
      cpu_executor_(std::move(parts.cpu_executor)),
      gpu_executor_(std::move(parts.gpu_executor)),
      sets_(parts.topology, parts.transport, arena_, params_,
            {std::move(listener.set_added), std::move(listener.set_removed)}),
      cross_set_(sets_, parts.topology.rank,
                 [this](ProcessSet& set, Entry* e, StatusCode code, const std::string& message) {
                   finish(set, e, code, message);
                 }),
      negotiator_(params_, sets_, cross_set_, fast_path_, std::move(listener.stall_warning),
                  std::move(listener.stall_notices), parts.topology.hostnames) {
  // DYNAMIC (Horovod's value) arms the timeline for Engine::startTimeline() only.
  if (!params_.timeline.empty() && params_.timeline != "DYNAMIC") {
    const int rank = parts.transport->rank();
    timeline_ = std::make_unique<Timeline>(
        Timeline::pathForRank(params_.timeline, rank, parts.transport->size()), rank);
    mark_cycles_ = params_.timeline_mark_cycles;
  }
}

bool Cycle::drain() {
  if (!submissions_.hasQueued()) return false;
  std::vector<std::unique_ptr<Entry>> batch = submissions_.drain(std::move(drained_));
  auto failQueued = [this](Entry* raw, StatusCode code, const std::string& message) {
    submissions_.release(raw->request.process_set, raw->request.name);
    raw->handle->complete(code, message);
  };
  for (auto& e : batch) {
    Entry* raw = e.get();
    // The set exists: submit() checked it, and sets are removed only by the cycle, which
    // fails a removed set's queue entries below.
    ProcessSet* set = sets_.byId(raw->request.process_set);
    if (set == nullptr) {
      failQueued(
          raw, StatusCode::kInvalidArgument,
          PERSEUS_STR(opTypeName(raw->request.op) << " '" << raw->request.name << "': process set "
                                                  << raw->request.process_set << " was removed"));
      continue;
    }
    if (std::optional<std::string> failure = cross_set_.takeConflict(*set, raw->request)) {
      failQueued(raw, StatusCode::kMismatch, *failure);
      continue;
    }
    set->adopt(std::move(e));
    set->fresh.push_back(raw);
  }
  const bool any = !batch.empty();
  batch.clear();  // every entry moved or failed above
  drained_ = std::move(batch);
  return any;
}

bool Cycle::pending() const { return sets_.pending(); }

std::unique_ptr<Timeline> Cycle::swapTimeline(std::unique_ptr<Timeline> timeline,
                                              bool mark_cycles) {
  std::swap(timeline_, timeline);
  mark_cycles_ = timeline_ != nullptr && mark_cycles;
  return timeline;
}

Cycle::Stats Cycle::stats() const {
  Stats s;
  static_cast<NegotiationStats&>(s) = negotiator_.stats();
  s.cycles = cycles_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace perseus::engine
