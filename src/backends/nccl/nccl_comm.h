// One NCCL communicator. No NCCL call may hang the engine thread: a communicator is created
// non-blocking (the call that returns ncclInProgress is waited out by polling
// ncclCommGetAsyncError against PERSEUS_TIMEOUT), and collectives run on a blocking twin split
// from it, each call watched by the launch watchdog (Note [Blocking launches],
// launch_watchdog.h). Any failure aborts the communicator (ncclCommAbort) and throws the core's
// exceptions (PeerLostError for remote/system errors, TimeoutError, InternalError).
//
// Thread contract: the engine thread, except checkAsync()/aborted(), which GpuWork::poll() may
// call from the thread that polls, and expireIfStuck() (the watchdog's thread).
#pragma once

#include <nccl.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "collectives/communicator.h"

namespace perseus::nccl {

struct NcclApi;

class NcclComm {
 public:
  // Collective over `comm`: set rank 0 creates the unique id, collectives::broadcast carries it
  // to the others, and each rank joins on `device`. `label` names the group in messages.
  // Returns the blocking twin, which keeps the non-blocking communicator it came from.
  static std::shared_ptr<NcclComm> create(collectives::Communicator& comm, int device,
                                          double timeout_s, std::string label);
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  // Collective over this communicator (every rank calls it, in the same order): the ranks with
  // the same color form a new (blocking) communicator, ordered by key.
  std::shared_ptr<NcclComm> split(int color, int key, std::string label);

  // One NCCL call on this communicator (`call` makes it and returns its result), watched while
  // it runs when the communicator blocks; then check().
  template <typename Call>
  void run(const char* what, Call&& call) {
    if (blocking_) {
      busy_what_.store(what, std::memory_order_relaxed);
      busy_since_.store(nowTicks(), std::memory_order_release);
    }
    const ncclResult_t result = call();
    if (blocking_) busy_since_.store(0, std::memory_order_release);
    check(result, what);
  }

  ncclComm_t get() const { return comm_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  int device() const { return device_; }
  const std::string& label() const { return label_; }

  // Checks the result of a call on this communicator: waits out ncclInProgress, throws (after
  // aborting) on any error.
  void check(ncclResult_t result, const char* what);
  // Throws (after aborting) when NCCL reported an asynchronous error; no-op otherwise.
  void checkAsync();
  // Idempotent. Afterwards every call fails and the GPU kernels of this communicator exit.
  void abort();
  bool aborted() const { return aborted_.load(); }
  // The watchdog: aborts the communicator when one call has run longer than PERSEUS_TIMEOUT.
  void expireIfStuck(std::chrono::steady_clock::time_point now);

 private:
  NcclComm(const NcclApi* api, ncclComm_t comm, int rank, int size, int device, double timeout_s,
           std::string label, bool blocking);
  static int64_t nowTicks() { return std::chrono::steady_clock::now().time_since_epoch().count(); }
  [[noreturn]] void fail(ncclResult_t result, const char* what);
  [[noreturn]] void timedOut(const char* what);
  void settle(const char* what);

  const NcclApi* api_;
  ncclComm_t comm_;
  int rank_, size_, device_;
  double timeout_s_;
  std::string label_;
  const bool blocking_;
  // The non-blocking communicator a twin was split from: kept, and aborted with it.
  std::shared_ptr<NcclComm> parent_;
  // steady_clock ticks when the current blocking call began; 0 while none runs.
  std::atomic<int64_t> busy_since_{0};
  std::atomic<const char*> busy_what_{nullptr};
  std::atomic<bool> timed_out_{false};
  std::atomic<bool> aborted_{false};
  std::mutex abort_mutex_;
};

}  // namespace perseus::nccl
