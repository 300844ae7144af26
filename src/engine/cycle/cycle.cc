// One engine cycle (Note [Engine cycle] in engine.h): negotiate each set with work
// (SetNegotiator), then run its responses (execute.cc). Holder of the cycle lock only (cycle.h).
#include "engine/cycle/cycle.h"

#include <algorithm>
#include <sstream>

#include "common/logging.h"

namespace perseus::engine {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

bool Cycle::run(bool shutdown) {
  more_work_ = false;
  const auto cycle_start = mark_cycles_ ? Clock::now() : Clock::time_point{};
  const bool progress = runSets(shutdown);
  cycles_.fetch_add(1, std::memory_order_relaxed);
  if (timeline_ && mark_cycles_) timeline_->span("cycles", "CYCLE", cycle_start, Clock::now());
  if (timeline_) timeline_->flush();
  return progress;
}

bool Cycle::runSets(bool shutdown) {
  Phase phase;
  try {
    bool progress = negotiateAndRun(sets_.global(), shutdown, &phase);
    if (stopped_.load()) return true;  // a rank shut the job down
    // Other sets in group order; the global negotiation told every rank which have work.
    for (auto& [group, set] : sets_) {
      if (group == kGlobalGroup || !set->member() || !negotiator_.setHasWork(group)) continue;
      progress = negotiateAndRun(*set, shutdown, &phase) || progress;
    }
    return progress;
  } catch (const Error& e) {
    // Negotiation and collectives are collective: after a failure in either, ranks no longer
    // agree on what comes next, so nothing else may run (Note [Engine cycle]).
    breakEngine(e, phase.describe());
    return true;
  } catch (const std::exception& e) {
    breakEngine(InternalError(e.what()), phase.describe());
    return true;
  }
}

bool Cycle::negotiateAndRun(ProcessSet& set, bool shutdown, Phase* phase) {
  const bool global = set.group_id == kGlobalGroup;
  *phase = {false, set.id, global};
  SetNegotiator::Agreement out = negotiator_.negotiate(set, global, shutdown, timeline_.get());
  if (out.shutdown) {
    stopAll(StatusCode::kShutDown, shutdownMessage(out.leaving));
    return true;
  }
  if (out.more_work) more_work_ = true;
  phase->executing = true;
  execute(set, out.responses);
  const bool ran = !out.responses.empty();
  set.agreed = std::move(out.responses);
  return ran;
}

std::string Cycle::shutdownMessage(const std::vector<int>& leaving) const {
  // Another rank than this one is the one to look at, when there is one.
  auto other = std::find_if(leaving.begin(), leaving.end(), [this](int r) { return r != rank_; });
  if (other == leaving.end()) {
    return "Perseus was shut down: this rank called shutdown() while this operation was pending";
  }
  const int who = *other;
  const auto more = std::count_if(other + 1, leaving.end(), [this](int r) { return r != rank_; });
  std::ostringstream msg;
  msg << "Perseus was shut down: rank " << who;
  if (who < static_cast<int>(hostnames_.size())) msg << " on host " << hostnames_[who];
  if (more > 0) msg << " (and " << more << " more)";
  msg << " called shutdown() (at exit, or after an error on that rank) while this operation "
         "was pending";
  return msg.str();
}

std::string Cycle::Phase::describe() const {
  const std::string which =
      global ? "the global process set" : PERSEUS_STR("process set " << set_id);
  return executing ? "execution of " + which + "'s collectives" : "negotiation of " + which;
}

}  // namespace perseus::engine
