// Note [Blocking launches]
// A non-blocking NCCL communicator (config.blocking = 0) never blocks its caller, but NCCL
// runs every group launch of one on a thread it creates for that launch (pthread_create in
// ncclGroupEnd): measured on 2 H200s, the launch of a 4-byte allreduce took 56-64 µs (the
// timeline's LAUNCH span) and the whole operation 90-102 µs against NCCL's 31-44 through
// torch, whose communicators block; with NCCL_COMM_BLOCKING=1 ours took 45.5 µs against 43.7
// (bench/gpu/two_gpu.py, docs/PERFORMANCE.md, GPU). So collectives run on blocking communicators,
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
