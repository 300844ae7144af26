// GpuWork of the CUDA data plane: a completion event on the slot stream, the NCCL communicators
// the work ran on (polled for asynchronous errors while it is pending), a deadline, and the
// optional NaN-check result.
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backends/gpu_backend.h"
#include "backends/nccl/device_context.h"
#include "backends/nccl/nccl_comm.h"

namespace perseus::nccl {

class CudaWork : public backends::GpuWork {
 public:
  // `what` names the operation and its tensors in messages.
  CudaWork(std::shared_ptr<EventPool> events, std::string what, double timeout_s,
           std::vector<std::shared_ptr<NcclComm>> comms);
  // A work that is done when `done` is: an event recorded elsewhere (a tensor's ready event),
  // kept alive by the work; recordDone() must not be called.
  CudaWork(std::shared_ptr<EventPool> events, std::string what, double timeout_s,
           std::shared_ptr<CudaEvent> done);
  ~CudaWork() override;

  // Engine thread, once, after everything is enqueued on `stream`.
  void recordDone(cudaStream_t stream);
  // The NaN index of this work lands in *host_flag (pinned) once done; names in batch order.
  void setNanCheck(const int* host_flag, std::vector<std::string> names);
  // Makes every later poll()/wait() throw `error` (backend abort). Any thread.
  void fail(std::exception_ptr error);

  bool poll() override;
  void wait() override;
  void streamWait(void* stream) override;
  std::string nonFiniteTensor() override;
  bool completionStream(const void** stream, uint64_t* order) const override;

 private:
  void rethrowIfFailed();

  std::shared_ptr<EventPool> events_;
  std::shared_ptr<CudaEvent> borrowed_;  // set: done_ is its event, not ours to release
  cudaEvent_t done_ = nullptr;
  cudaStream_t done_stream_ = nullptr;  // where done_ was recorded, once recorded
  uint64_t done_order_ = 0;             // recordInOrder's place; 0: not recorded
  std::string what_;
  std::chrono::steady_clock::time_point deadline_;
  double timeout_s_;
  std::vector<std::shared_ptr<NcclComm>> comms_;
  const int* nan_host_ = nullptr;
  std::vector<std::string> names_;
  bool done_seen_ = false;
  std::mutex mutex_;
  std::exception_ptr error_;
};

}  // namespace perseus::nccl
