// One NCCL communicator, created non-blocking so that no NCCL call can hang the engine thread:
// every call that returns ncclInProgress is waited out here by polling ncclCommGetAsyncError
// against PERSEUS_TIMEOUT, and any failure aborts the communicator (ncclCommAbort) and throws
// the core's exceptions (PeerLostError for remote/system errors, TimeoutError, InternalError).
//
// Thread contract: the engine thread, except checkAsync()/aborted(), which GpuWork::poll() may
// call from the thread that polls.
#pragma once

#include <nccl.h>

#include <atomic>
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
  static std::shared_ptr<NcclComm> create(collectives::Communicator& comm, int device,
                                          double timeout_s, std::string label);
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  // Collective over this communicator (every rank calls it, in the same order): the ranks with
  // the same color form a new communicator, ordered by key.
  std::shared_ptr<NcclComm> split(int color, int key, std::string label);

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

 private:
  NcclComm(const NcclApi* api, ncclComm_t comm, int rank, int size, int device, double timeout_s,
           std::string label);
  [[noreturn]] void fail(ncclResult_t result, const char* what);
  void settle(const char* what);

  const NcclApi* api_;
  ncclComm_t comm_;
  int rank_, size_, device_;
  double timeout_s_;
  std::string label_;
  std::atomic<bool> aborted_{false};
  std::mutex abort_mutex_;
};

}  // namespace perseus::nccl
