// TEST SUPPORT ONLY. An in-process ShmArena for ranks-as-threads tests: one InProcArenaHost
// owns the slots of a simulated host (plain heap memory shared by the threads) and hands each
// local rank its ShmArena view. The barrier is the same epoch scheme as the real one (each
// member publishes its arrival count per group and waits for every member's count), with
// spin-then-yield, TimeoutError after Params::timeout_s and ShutDownError after abort().
// Several hosts are simulated with several InProcArenaHost objects.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "common/params.h"
#include "transport/shm/shm_arena.h"

namespace perseus::testing {

class InProcArenaHost {
 public:
  // `global_ranks[i]` is the global rank of local rank i.
  InProcArenaHost(std::vector<int> global_ranks, size_t slot_bytes, const Params& params);
  ~InProcArenaHost();

  // Local rank `local_rank`'s view; owned by this host object.
  transport::ShmArena* arena(int local_rank) { return views_[local_rank].get(); }
  void abortAll(const std::string& reason);

 private:
  friend class InProcArenaView;
  struct alignas(64) Epoch {
    std::atomic<uint64_t> value{0};
    std::atomic<uint64_t> carried[2] = {};  // barrierMax(): barrier e uses carried[e % 2]
  };
  std::vector<int> global_ranks_;
  size_t slot_bytes_;
  double timeout_s_;
  std::vector<unsigned char*> slots_;
  std::unique_ptr<Epoch[]> epochs_;  // [local rank][group]
  std::atomic<bool> aborted_{false};
  std::vector<std::unique_ptr<transport::ShmArena>> views_;
};

}  // namespace perseus::testing
