// ShmArena over the segments of one host: slot i is local rank i's slot region, and each
// rank's segment carries one barrier epoch counter per group (see barrier()).
//
// Thread contract: barrier(), slot() from the engine thread (or a test's rank thread) only;
// abort() and sharedArea() from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/params.h"
#include "transport/shm/shm_arena.h"
#include "transport/shm/shm_doorbell.h"
#include "transport/shm/shm_segment_set.h"

namespace perseus::transport::shm {

class ShmArenaImpl : public ShmArena {
 public:
  ShmArenaImpl(std::shared_ptr<ShmSegmentSet> set, std::shared_ptr<ShmDoorbell> doorbell,
               const Params& params);

  int localRank() const override { return set_->localRank(); }
  int localSize() const override { return set_->localSize(); }
  const std::vector<int>& globalRanks() const override { return set_->globalRanks(); }
  size_t slotBytes() const override { return set_->layout().slot_bytes; }
  int hostCpus() const override { return doorbell_->hostCpus().cpus; }
  void* slot(int local_rank) override;
  // Each member bumps its own counter for `group_id` (release), rings the members that sleep,
  // and waits until every member's counter reaches its own (acquire). So writes to slots made
  // before the barrier are visible to every member after it. Counters only grow, and every
  // member makes the same sequence of barrier calls per group, so a member that already left
  // for the next barrier (counter ahead) still counts as arrived.
  void barrier(int group_id, const std::vector<int>& members) override;
  // The value travels in the member's own barrier line, slot (barrier number % 2): a member
  // can reach the barrier after next, which reuses the slot, only once every member has
  // arrived at the next one, i.e. has read this one's values.
  uint64_t barrierMax(int group_id, const std::vector<int>& members, uint64_t value) override;
  uint64_t barriers(int group_id) const override;
  // Only the local count moves: the shared counter, which peers still in an old barrier of
  // the group may read, only ever grows, and the next barrier stores count + 1 there.
  void continueBarriersFrom(int group_id, uint64_t count) override;
  void abort(const std::string& reason) override;
  void recordLostPeer(int lost_rank, const std::string& reason) override {
    set_->recordCause(lost_rank, reason);
  }
  void checkPeer(int local_rank, const std::string& waiting_for) const override;
  SharedArea sharedArea(int local_rank) override;

 private:
  void checkGroup(int group_id) const;
  void validateMembers(int group_id, const std::vector<int>& members) const;
  void checkAborted() const;
  // First member whose counter for the group is below `target`, or -1 when all arrived.
  int firstMissing(int group_id, const std::vector<int>& members, uint64_t target) const;
  // barrier() and barrierMax(): `carried`, if not null, is stored in this rank's line before
  // it arrives. Returns the barrier's number.
  uint64_t arrive(int group_id, const std::vector<int>& members, const uint64_t* carried);

  std::shared_ptr<ShmSegmentSet> set_;
  std::shared_ptr<ShmDoorbell> doorbell_;
  const std::chrono::microseconds spin_;
  const std::chrono::duration<double> timeout_;
  const bool yield_when_idle_;    // doorbell_->oversubscribed(): every idle pass yields the core
  std::vector<uint64_t> epochs_;  // this rank's counter per group (its shared copy mirrors it)

  std::atomic<bool> aborted_{false};
  mutable std::mutex abort_mutex_;
  std::string abort_reason_;
};

}  // namespace perseus::transport::shm
