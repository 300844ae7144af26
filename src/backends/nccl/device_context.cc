#include "backends/nccl/device_context.h"

#include <algorithm>

#include "backends/nccl/cuda_util.h"
#include "common/logging.h"

namespace perseus::nccl {

uint64_t recordInOrder(cudaEvent_t event, cudaStream_t stream, const char* what) {
  static std::mutex mutex;
  static uint64_t next = 0;
  std::lock_guard<std::mutex> lock(mutex);
  checkCuda(cudaEventRecord(event, stream), what);
  return ++next;
}

EventPool::~EventPool() {
  for (cudaEvent_t e : free_) (void)cudaEventDestroy(e);
}

cudaEvent_t EventPool::acquire() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!free_.empty()) {
      cudaEvent_t e = free_.back();
      free_.pop_back();
      return e;
    }
  }
  DeviceGuard guard(device_);
  cudaEvent_t e = nullptr;
  checkCuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  return e;
}

void EventPool::release(cudaEvent_t event) {
  // Re-recording an event that a stream still waits on is allowed: the waiter captured the
  // earlier record. So a released event can be reused at once.
  std::lock_guard<std::mutex> lock(mutex_);
  free_.push_back(event);
}

DeviceContext::DeviceContext(int device, const Params& params)
    : device_(device),
      // Room for the hierarchical split's padding (Note [Hierarchical allreduce]) on top.
      fusion_bytes_(static_cast<size_t>(std::max<int64_t>(params.fusion_threshold, 1 << 20))),
      events_(std::make_shared<EventPool>(device)) {
  DeviceGuard guard(device);
  outputs_ = std::make_shared<DeviceBlockCache>(
      device, params.gpu_output_cache_bytes < 0
                  ? defaultOutputCacheBytes(device)
                  : static_cast<size_t>(params.gpu_output_cache_bytes));
  int least = 0, greatest = 0;
  checkCuda(cudaDeviceGetStreamPriorityRange(&least, &greatest),
            "cudaDeviceGetStreamPriorityRange");
  slots_.resize(static_cast<size_t>(std::max<int64_t>(params.num_streams, 1)));
  for (Slot& s : slots_) {
    checkCuda(cudaStreamCreateWithPriority(&s.stream, cudaStreamNonBlocking, greatest),
              "cudaStreamCreateWithPriority");
    checkCuda(cudaStreamCreateWithPriority(&s.h2d_stream, cudaStreamNonBlocking, greatest),
              "cudaStreamCreateWithPriority");
    checkCuda(cudaMalloc(reinterpret_cast<void**>(&s.nan_flag), sizeof(int)), "cudaMalloc");
    checkCuda(cudaHostAlloc(reinterpret_cast<void**>(&s.nan_host), kNanRing * sizeof(int),
                            cudaHostAllocDefault),
              "cudaHostAlloc");
  }
}

DeviceContext::~DeviceContext() {
  DeviceGuard guard(device_);
  for (Slot& s : slots_) {
    // Pending work on our streams must finish before its buffers go away.
    (void)cudaStreamSynchronize(s.stream);
    (void)cudaStreamSynchronize(s.h2d_stream);
    (void)cudaFree(s.fusion);
    (void)cudaFree(s.aux);
    (void)cudaFree(s.nan_flag);
    (void)cudaFreeHost(s.nan_host);
    (void)cudaStreamDestroy(s.stream);
    (void)cudaStreamDestroy(s.h2d_stream);
  }
  for (void* p : pinned_) (void)cudaFreeHost(p);
}

Slot& DeviceContext::nextSlot() {
  Slot& s = slots_[next_slot_];
  next_slot_ = (next_slot_ + 1) % slots_.size();
  if (s.fusion == nullptr) {
    DeviceGuard guard(device_);
    // 64 KiB beyond the threshold: hierarchical allreduce pads the buffer to a multiple of the
    // local size.
    checkCuda(cudaMalloc(&s.fusion, fusion_bytes_ + (64 << 10)), "cudaMalloc (fusion buffer)");
    PERSEUS_LOG(DEBUG, kCuda) << "fusion buffer of " << fusion_bytes_ << " bytes on device "
                              << device_;
  }
  return s;
}

void* DeviceContext::aux(Slot& slot) {
  if (slot.aux == nullptr) {
    DeviceGuard guard(device_);
    checkCuda(cudaMalloc(&slot.aux, fusion_bytes_ / 2 + (64 << 10)), "cudaMalloc (side buffer)");
  }
  return slot.aux;
}

void* DeviceContext::pinned(int index, size_t bytes) {
  if (pinned_bytes_[index] < bytes) {
    DeviceGuard guard(device_);
    // Earlier copies through the old buffer were waited for by their (synchronous) callers.
    (void)cudaFreeHost(pinned_[index]);
    pinned_[index] = nullptr;
    pinned_bytes_[index] = 0;
    const size_t size = std::max(bytes, size_t{1} << 20);
    checkCuda(cudaHostAlloc(&pinned_[index], size, cudaHostAllocDefault), "cudaHostAlloc");
    pinned_bytes_[index] = size;
  }
  return pinned_[index];
}

}  // namespace perseus::nccl
