#include "backends/nccl/gpu_work.h"

#include <thread>

#include "backends/nccl/cuda_util.h"
#include "common/logging.h"
#include "common/status.h"

namespace perseus::nccl {

namespace {

std::chrono::steady_clock::time_point deadlineAfter(double timeout_s) {
  return std::chrono::steady_clock::now() +
         std::chrono::duration_cast<std::chrono::steady_clock::duration>(
             std::chrono::duration<double>(timeout_s));
}

}  // namespace

CudaWork::CudaWork(std::shared_ptr<EventPool> events, std::string what, double timeout_s,
                   std::vector<std::shared_ptr<NcclComm>> comms)
    : events_(std::move(events)),
      what_(std::move(what)),
      deadline_(deadlineAfter(timeout_s)),
      timeout_s_(timeout_s),
      comms_(std::move(comms)) {
  done_ = events_->acquire();
}

CudaWork::CudaWork(std::shared_ptr<EventPool> events, std::string what, double timeout_s,
                   std::shared_ptr<CudaEvent> done)
    : events_(std::move(events)),
      borrowed_(std::move(done)),
      done_(borrowed_->get()),
      done_stream_(borrowed_->stream()),
      done_order_(borrowed_->order()),
      what_(std::move(what)),
      deadline_(deadlineAfter(timeout_s)),
      timeout_s_(timeout_s) {}

CudaWork::~CudaWork() {
  if (!borrowed_) events_->release(done_);
}

void CudaWork::recordDone(cudaStream_t stream) {
  done_order_ = recordInOrder(done_, stream, "cudaEventRecord (collective done)");
  done_stream_ = stream;
}

bool CudaWork::completionStream(const void** stream, uint64_t* order) const {
  // The per-thread default stream's handle names another stream in each thread.
  if (done_order_ == 0 || done_stream_ == cudaStreamPerThread) return false;
  // The legacy default stream has two handles.
  *stream = done_stream_ == cudaStreamLegacy ? nullptr : done_stream_;
  *order = done_order_;
  return true;
}

void CudaWork::setNanCheck(const int* host_flag, std::vector<std::string> names) {
  nan_host_ = host_flag;
  names_ = std::move(names);
}

void CudaWork::fail(std::exception_ptr error) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!done_seen_ && !error_) error_ = std::move(error);
}

void CudaWork::rethrowIfFailed() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (error_) std::rethrow_exception(error_);
}

bool CudaWork::poll() {
  if (done_seen_) return true;
  rethrowIfFailed();
  cudaError_t q = cudaEventQuery(done_);
  if (q == cudaSuccess) {
    std::lock_guard<std::mutex> lock(mutex_);
    done_seen_ = true;
    return true;
  }
  if (q != cudaErrorNotReady) checkCuda(q, "cudaEventQuery (collective done)");
  try {
    for (auto& c : comms_) c->checkAsync();
  } catch (...) {
    fail(std::current_exception());
    throw;
  }
  if (std::chrono::steady_clock::now() > deadline_) {
    for (auto& c : comms_) c->abort();
    auto error = std::make_exception_ptr(TimeoutError(PERSEUS_STR(
        what_ << " did not finish on the GPU within PERSEUS_TIMEOUT=" << timeout_s_
              << " s: a rank of the set stopped taking part (or its GPU hangs); the NCCL "
                 "communicators were aborted")));
    fail(error);
    std::rethrow_exception(error);
  }
  return false;
}

void CudaWork::wait() {
  for (int spins = 0; !poll(); ++spins) {
    if (spins > 2000) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

void CudaWork::streamWait(void* stream) {
  // Work queued later on the stream that recorded done_ runs after it already (a world-size-1
  // allreduce in place is done when the producer's stream gets there). The per-thread default
  // stream's handle names another stream in each thread.
  if (done_order_ != 0 && stream == done_stream_ && stream != cudaStreamPerThread) return;
  DeviceGuard guard(events_->device());
  checkCuda(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), done_, 0),
            "cudaStreamWaitEvent (framework stream on collective)");
}

std::string CudaWork::nonFiniteTensor() {
  if (nan_host_ == nullptr || !poll()) return std::string();
  const int index = *nan_host_;
  if (index < 0 || index >= static_cast<int>(names_.size())) return std::string();
  return names_[static_cast<size_t>(index)];
}

}  // namespace perseus::nccl
