// Note [Blocking launches]
// A non-blocking NCCL communicator (config.blocking = 0) never blocks its caller, but NCCL
// runs every group launch of one on a thread it creates for that launch (pthread_create in
// ncclGroupEnd), which roughly doubles a small allreduce's time against torch's blocking
// communicators (`bench/gpu/two_gpu.py bench` with and without NCCL_COMM_BLOCKING=1 shows it;
// docs/PERFORMANCE.md has the figures). So collectives run on blocking communicators,
// and what non-blocking ones gave us, that no NCCL call can hang the engine thread, comes from this
// watchdog instead, as torch's does it: each blocking call marks its communicator busy (a clock
// read and two atomic stores), and one thread per process aborts (ncclCommAbort) a communicator
// that stayed busy in one call for longer than its PERSEUS_TIMEOUT, which makes the stuck call
// return; the caller then throws TimeoutError. Creating a communicator, which needs every member
// and is where a missing peer is most likely met, still goes through a non-blocking one, polled
// against the same deadline (nccl_comm.cc).
#pragma once

#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace perseus::nccl {

class NcclComm;

class LaunchWatchdog {
 public:
  // The process's watchdog; its thread starts with the first communicator watched. Never
  // destroyed (communicators may be released during static destruction).
  static LaunchWatchdog& instance();

  void watch(NcclComm* comm);
  // Once this returns, the watchdog no longer touches `comm`.
  void forget(NcclComm* comm);

 private:
  LaunchWatchdog() = default;
  void loop();

  std::mutex mutex_;
  std::vector<NcclComm*> comms_;
  bool started_ = false;
};

}  // namespace perseus::nccl
