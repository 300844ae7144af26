// Every segment of one host as mapped in this process: this rank's own (created here) and each
// peer's (mapped after the start-up barrier). Shared by the ShmChannels, the ShmArena and the
// ShmDoorbell of one rank (shared_ptr), so it outlives whichever of them goes last; its
// destructor marks this rank "closed" so that peers stop waiting for it at once.
// See Note [Shared-memory segments] in shm_local_group.h for the start-up protocol.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "transport/shm/process_watch.h"
#include "transport/shm/shm_layout.h"
#include "transport/shm/shm_segment.h"

namespace perseus::transport::shm {

class ShmSegmentSet {
 public:
  // Step 1: creates and initialises this rank's segment.
  ShmSegmentSet(const std::string& job_id, int local_rank, std::vector<int> global_ranks,
                size_t ring_bytes, size_t slot_bytes);
  ~ShmSegmentSet();
  ShmSegmentSet(const ShmSegmentSet&) = delete;
  ShmSegmentSet& operator=(const ShmSegmentSet&) = delete;

  // Step 3 (after every local rank created its segment): maps and validates the peers'.
  // Throws MismatchError when a peer was configured differently.
  void mapPeers();
  // Step 5 (after every local rank mapped every segment): removes this rank's name.
  void unlinkOwn();

  int localRank() const { return local_rank_; }
  int localSize() const { return static_cast<int>(global_ranks_.size()); }
  const std::vector<int>& globalRanks() const { return global_ranks_; }
  const SegmentLayout& layout() const { return layout_; }
  // The CPUs each local rank may run on, as it published them in its header when it created
  // its segment (after mapPeers(); Note [Binding ranks to cores] in cpu_budget.h).
  std::vector<std::vector<int>> cpuMasks() const;

  SegmentHeader* header(int lr) const { return reinterpret_cast<SegmentHeader*>(base(lr)); }
  std::atomic<uint64_t>* epoch(int lr, int group) const {
    return &reinterpret_cast<BarrierEpoch*>(base(lr) + layout_.epochs_offset)[group].value;
  }
  std::atomic<uint64_t>* carried(int lr, int group, uint64_t barrier) const {
    return &reinterpret_cast<BarrierEpoch*>(base(lr) + layout_.epochs_offset)[group]
                .carried[barrier % 2];
  }
  RingControl* ring(int owner, int sender) const {
    return reinterpret_cast<RingControl*>(base(owner) + layout_.ringOffset(owner, sender));
  }
  char* ringData(int owner, int sender) const {
    return base(owner) + layout_.ringDataOffset(owner, sender);
  }
  char* slot(int lr) const { return base(lr) + layout_.slot_offset; }
  // ShmArena::sharedArea(): words, then bytes.
  std::atomic<uint64_t>* sharedWords(int lr) const {
    return reinterpret_cast<std::atomic<uint64_t>*>(base(lr) + layout_.shared_words_offset);
  }
  unsigned char* sharedBytes(int lr) const {
    return reinterpret_cast<unsigned char*>(base(lr) + layout_.shared_bytes_offset);
  }

  // Wakes local rank `lr` if it sleeps on its doorbell. Call after publishing whatever it may
  // be waiting for WITH A seq_cst STORE, which the sleeper re-checks with seq_cst loads (see
  // ShmDoorbell::arm); costs one load when it does not sleep.
  void notify(int lr) const;
  // Rings local rank `lr` whether or not it sleeps: its doorbell's count moves (which a rank
  // that spins before sleeping watches, Transport::waitIncoming()) and sleepers wake. For rings
  // that carry no bytes, which no channel would report; costs a shared read-modify-write.
  void alert(int lr) const;
  // True (with a reason) when local rank `lr` closed its transport or its process exited.
  bool peerGone(int lr, std::string* why) const;
  // Publishes in this rank's header that it stops because global rank `lost_rank` was lost
  // (first call wins), so that peers name that rank when they see this one go.
  void recordCause(int lost_rank, const std::string& reason) const;
  // Throws PeerLostError naming lr's global rank, or the rank whose loss stopped lr when lr
  // recorded one (recordCause); `waiting_for` says what this rank was doing.
  [[noreturn]] void throwPeerLost(int lr, const std::string& why,
                                  const std::string& waiting_for) const;

 private:
  char* base(int lr) const { return segments_[lr]->base(); }

  int local_rank_;
  std::vector<int> global_ranks_;
  SegmentLayout layout_;
  std::string job_id_;
  std::string own_name_;
  bool own_linked_ = true;
  std::vector<std::unique_ptr<ShmSegment>> segments_;   // by local rank
  std::vector<std::unique_ptr<ProcessWatch>> watches_;  // by local rank; null for self
};

}  // namespace perseus::transport::shm
