// Negotiating one process set in a cycle (Note [Engine cycle] in engine.h): its new entries
// are looked up in the set's response cache, one control-vector allreduce over the members
// says which cached responses every rank is ready for, and when some rank has uncached
// requests, set rank 0's coordinator answers them in one round. The result, the set's
// responses for this cycle, is the same on every member and in the same order.
//
// The global set's negotiation also carries the job-wide facts: a shutdown, which other sets
// have work, whether every rank can post (Note [Posted collectives]), and the cross-set name
// check's requests and conflicts.
//
// Contract: the Cycle, under the cycle lock; stats() any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/params.h"
#include "engine/cycle/cross_set_names.h"
#include "engine/cycle/set_table.h"
#include "engine/cycle/straggler_watch.h"
#include "engine/fast_path.h"
#include "engine/timeline.h"
#include "negotiation/control.h"

namespace perseus::engine {

// Negotiation counters (relaxed; any thread reads them).
struct NegotiationStats {
  uint64_t control_exchanges = 0, control_bytes = 0, coordinator_rounds = 0, cached_responses = 0,
           coordinated_responses = 0, negotiation_ns = 0;
};

// The age at which a waiting collective is looked at: the earlier of PERSEUS_STALL_WARNING
// and PERSEUS_STALL_DIAGNOSIS (when on).
double stallAttentionSeconds(const Params& params);

class SetNegotiator {
 public:
  using StallWarning = std::function<void(const std::string&)>;
  // Every rank, with the coordinator's notices of a cycle (PERSEUS_STALL_DIAGNOSIS).
  using StallNotices = std::function<void(const std::vector<StallNotice>&)>;
  // `hostnames`: every global rank's host.
  SetNegotiator(const Params& params, ProcessSetTable& sets, CrossSetNames& cross_set,
                const FastPath& posted, StallWarning stall_warning, StallNotices stall_notices,
                std::vector<std::string> hostnames);

  // What the set's members agreed on in one negotiation.
  struct Agreement {
    // To execute, in order. Made in the storage of set.agreed, which the caller gives back
    // after running them (ProcessSet::agreed).
    std::vector<Response> responses;
    bool shutdown = false;     // global set: some rank shuts the job down
    std::vector<int> leaving;  // with `shutdown`: the ranks that asked for it
    bool more_work = false;    // requests left for the coordinator's next round
  };
  // One negotiation of `set` (collective over its members). `global`: the global set, which
  // carries this rank's `shutdown` and the job-wide facts. `timeline` may be null.
  Agreement negotiate(ProcessSet& set, bool global, bool shutdown, Timeline* timeline);
  // Whether the last global negotiation said that some rank has work in set `group`.
  bool setHasWork(int group) const { return (sets_with_work_ >> group) & 1; }

  NegotiationStats stats() const;

 private:
  using Clock = std::chrono::steady_clock;
  // Moves set.fresh into the cache hits and set.uncached; `invalid_bits` gets the bits this
  // rank needs renegotiated (a changed request, a stalled hit).
  void classifyFresh(ProcessSet& set, Clock::time_point now, std::vector<int>* invalid_bits);
  // The negotiation's steps after classifyFresh, in order.
  // This rank's state for the control-vector exchange: flags, ready and invalid bits, written
  // into set.control.
  ControlVector& describeThisRank(ProcessSet& set, bool global, bool shutdown,
                                  Clock::time_point now, const std::vector<int>& invalid_bits,
                                  const std::vector<Request>& announced);
  // The ready bits: the cached responses this rank can run now.
  void markReady(ProcessSet& set, ControlVector* cv);
  // The control-vector allreduce over the set's members.
  void exchangeControl(ProcessSet& set, ControlVector* cv);
  // Global set: the job-wide facts of the exchange. False when some rank shuts the job down
  // (`out` then says who).
  bool learnJobFacts(ProcessSet& set, bool shutdown, const ControlVector& cv, Agreement* out);
  // Cached responses that some rank invalidated, or that a joined rank cannot serve, go back
  // to the coordinator.
  void dropInvalidated(ProcessSet& set, const ControlVector& cv);
  // The cached responses that every member is ready for, copied over *out's elements (whose
  // names' and shapes' storage they reuse), which are then as many.
  void takeCachedResponses(ProcessSet& set, const ControlVector& cv, std::vector<Response>* out);
  // Sends the uncached requests (and `announced`) to the coordinator and caches its answers.
  std::vector<Response> coordinateUncached(ProcessSet& set, bool global,
                                           const std::vector<Request>& announced);
  // The coordinator round: every member sends its requests to set rank 0, which answers.
  std::vector<Response> coordinate(ProcessSet& set, const std::vector<Request>& requests);
  // Set rank 0: stall warnings, and PERSEUS_STALL_SHUTDOWN's error responses.
  void inspectStalls(ProcessSet& set, std::vector<Response>* responses);
  // Set rank 0: the notices of collectives that waited past PERSEUS_STALL_DIAGNOSIS.
  std::vector<StallNotice> diagnoseStalls(ProcessSet& set, Clock::time_point now);
  // This rank's wait for each of the cycle's responses until `now`, when they were agreed: the
  // timeline's NEGOTIATE spans and the straggler watch.
  void recordWaits(ProcessSet& set, bool global, const std::vector<Response>& responses,
                   Timeline* timeline, Clock::time_point now);

  const Params& params_;
  ProcessSetTable& sets_;
  CrossSetNames& cross_set_;
  const FastPath& posted_;
  const StallWarning stall_warning_;
  const StallNotices stall_notices_;
  const std::vector<std::string> hostnames_;
  std::unique_ptr<StragglerWatch> straggler_;  // null when PERSEUS_STRAGGLER_THRESHOLD=0
  std::vector<StallNotice> notices_;           // set rank 0: for this coordinator round
  static_assert(kMaxGroups <= 64, "one word of the control vector holds the sets' work");
  uint64_t sets_with_work_ = 0;  // bit g: some rank has work in the set of group id g

  std::atomic<uint64_t> control_exchanges_{0}, control_bytes_{0}, coordinator_rounds_{0},
      cached_responses_{0}, coordinated_responses_{0}, negotiation_ns_{0};
};

}  // namespace perseus::engine
