// Shared staging memory of the ranks of one host, for collectives that read and write peers'
// memory directly instead of sending messages (see Note [Shared-memory allreduce] in
// collectives/allreduce_shm.cc).
//
// Each local rank owns one slot of slotBytes() bytes, mapped read-write in every local process
// at a fixed address per process (registered once: no allocation or page fault per call).
// barrier() synchronises a group of local ranks; each group (one per communicator) has its own
// flags, identified by `group_id` (0 .. kMaxGroups-1), so overlapping process sets don't mix.
//
// Thread contract: the engine thread (or a test's rank thread) only.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace perseus::transport {

class ShmArena {
 public:
  static constexpr int kMaxGroups = 64;

  virtual ~ShmArena() = default;
  virtual int localRank() const = 0;
  virtual int localSize() const = 0;
  // The global rank of each local rank, in local-rank order.
  virtual const std::vector<int>& globalRanks() const = 0;
  virtual size_t slotBytes() const = 0;
  // The CPUs that the ranks of this host may run on together: the union of their affinity
  // masks (Note [Binding ranks to cores], shm/cpu_budget.h).
  virtual int hostCpus() const = 0;
  // Local rank `local_rank`'s slot as mapped in this process.
  virtual void* slot(int local_rank) = 0;
  // Waits until every rank in `members` (local ranks, sorted, including this one) has reached
  // the same barrier call for this group. Spins, then yields; throws PeerLostError if a member
  // process died, TimeoutError after PERSEUS_TIMEOUT, ShutDownError after abort().
  virtual void barrier(int group_id, const std::vector<int>& members) = 0;
  // barrier(), which also returns the largest `value` that any member passed to this call
  // (every member must call barrierMax, not barrier, at this point). Lets members agree on a
  // figure, e.g. the slowest member's time, without a message of its own.
  virtual uint64_t barrierMax(int group_id, const std::vector<int>& members, uint64_t value) = 0;
  // This rank's barriers of the group so far.
  virtual uint64_t barriers(int group_id) const = 0;
  // Numbers this rank's next barrier of the group `count` + 1 (count >= barriers(group_id)).
  // For a group id that a new member list takes over: every new member must call it with the
  // same count before the group's next barrier (collectives::reuseGroup agrees on it).
  virtual void continueBarriersFrom(int group_id, uint64_t count) = 0;
  virtual void abort(const std::string& reason) = 0;
  // This rank stops because global rank `lost_rank` was lost (`reason`): published where the
  // other local ranks read it when they see this rank go, so that they name `lost_rank`, not
  // this rank. Call before closing; a no-op where no peer could read it.
  virtual void recordLostPeer(int lost_rank, const std::string& reason) {
    (void)lost_rank;
    (void)reason;
  }

  // Throws PeerLostError when local rank `local_rank`'s process is gone, naming its global rank
  // (or the rank whose loss stopped it) and what this rank was `waiting_for`, as a transport
  // names a lost peer. A no-op where the arena cannot tell. Any thread.
  virtual void checkPeer(int local_rank, const std::string& waiting_for) const {
    (void)local_rank;
    (void)waiting_for;
  }

  // Shared memory the arena keeps for a layer above it and never touches itself (the post
  // board of the posted collectives, collectives/post_board.h): per local rank, `num_words`
  // lock-free 64-bit atomics, zero at creation, then `num_bytes` bytes, mapped in every local
  // process at a fixed address. Any thread. Empty (null) where the arena has none.
  struct SharedArea {
    std::atomic<uint64_t>* words = nullptr;
    size_t num_words = 0;
    unsigned char* bytes = nullptr;
    size_t num_bytes = 0;
  };
  virtual SharedArea sharedArea(int local_rank) {
    (void)local_rank;
    return {};
  }
};

}  // namespace perseus::transport
