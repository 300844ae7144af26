// The submission side of the engine (Note [Engine cycle]): the queue that the cycle drains, the
// (process set, name) of every submitted request that has not completed yet, and why the
// engine stopped.
//
// Contract: any thread. One mutex guards it all; it is held for a few container operations
// only, never while a handle completes or the transport is touched. A name is claimed once
// per submission and released when its request completes (or fails), so a second submission
// of a name in flight is a DuplicateNameError at the caller.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common/status.h"
#include "engine/entry.h"

namespace perseus::engine {

class Submissions {
 public:
  struct Stop {
    StatusCode code = StatusCode::kOk;  // kOk while the engine runs
    std::string message;
    bool stopped() const { return code != StatusCode::kOk; }
  };

  enum class Admission {
    kQueued,     // claimed and queued: the entry is the queue's now
    kClaimed,    // claimed only (submit with queue=false): the caller queues it or releases
    kDuplicate,  // the name is in flight: nothing was done
    kStopped,    // the engine stopped (`*stop` says why): nothing is claimed
  };

  // Claims e's (set, name), and queues e when `queue`.
  Admission submit(std::unique_ptr<Entry>& e, bool queue, Stop* stop);
  // Queues e, whose name the caller holds claimed, or, with `claim`, claims it first (a post
  // falling back: its name was in flight in its slot, not here). On kStopped an existing claim
  // is released; on kDuplicate or kStopped e stays with the caller.
  Admission queue(std::unique_ptr<Entry>& e, bool claim, Stop* stop);

  void release(int32_t set, const std::string& name);
  // The names of `n` completed entries of `set`, under one lock.
  void release(int32_t set, Entry* const* done, size_t n);
  // A removed set's names (set ids are never reused): what is still queued for it fails in the
  // cycle's drain, whose release then finds nothing to release.
  void forgetSet(int32_t set);

  // Whether entries wait in the queue. A seq_cst load: the engine thread re-checks it after
  // announcing that it blocks (Dekker, Note [Engine cycle]).
  bool hasQueued() const { return queued_.load(); }
  // The queued entries, in submission order (the cycle holder). `spare`'s storage becomes the
  // queue's: a caller that hands back the last batch, emptied, makes no allocation per drain.
  std::vector<std::unique_ptr<Entry>> drain(std::vector<std::unique_ptr<Entry>> spare = {});

  // Records the first stop's cause, forgets every in-flight name and returns the queued
  // entries for the caller to fail.
  std::vector<std::unique_ptr<Entry>> stop(StatusCode code, const std::string& message);
  Stop stopCause() const;

 private:
  using NameSet = std::unordered_set<std::string>;
  // Enough for a step's worth of small calls in flight; beyond it, released names are freed.
  static constexpr size_t kKeptNames = 256;

  // Names claimed in `set`; a new one is copied in once, into a released name's node if any.
  bool claimLocked(int32_t set, const std::string& name);
  void releaseLocked(NameSet& names, const std::string& name);
  void pushLocked(std::unique_ptr<Entry>& e);

  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Entry>> queue_;
  // Per process set, hashed by name: the engine thread erases one name per completed tensor (a
  // tree erase was a tenth of its time with 1000 tensors per step), by the entry's own string
  // (a (set, name) key would copy the name for every lookup).
  std::unordered_map<int32_t, NameSet> in_flight_;
  // Released names' nodes, kept with their storage: the next claims copy into them.
  std::vector<NameSet::node_type> spare_names_;
  Stop stop_;
  std::atomic<bool> queued_{false};
};

}  // namespace perseus::engine
