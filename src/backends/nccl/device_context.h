// What the GPU data plane keeps per device: PERSEUS_NUM_STREAMS slots (a high-priority stream,
// its fusion buffer and NaN flag: one fused buffer in flight per slot), a pool of CUDA events,
// and pinned host memory for the host-staged path. Created on the first collective that uses
// the device; everything is allocated lazily, once, and reused (no cudaMalloc per call), and
// the cache of library-owned output blocks (Note [Output block cache]).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "backends/gpu_backend.h"
#include "backends/nccl/device_block_cache.h"

namespace perseus::nccl {

// NaN flags start here (cudaMemsetAsync with byte 0x7F), above any tensor index.
constexpr int kNoNonFinite = 0x7F7F7F7F;

// Timing-free events, recycled. Shared by the device context and every event or work that
// still holds one of its events, so it outlives them all. Thread-safe.
class EventPool {
 public:
  explicit EventPool(int device) : device_(device) {}
  ~EventPool();
  cudaEvent_t acquire();
  void release(cudaEvent_t event);
  int device() const { return device_; }

 private:
  int device_;
  std::mutex mutex_;
  std::vector<cudaEvent_t> free_;
};

// Records `event` on `stream`; returns the record's place among all records made through
// here. Records are serialised, so on any one stream a later place is a later record
// (backends::GpuWork::completionStream).
uint64_t recordInOrder(cudaEvent_t event, cudaStream_t stream, const char* what);

// A "tensor ready" event (backends::GpuEvent), once recorded on its stream; returns its event
// to the pool.
class CudaEvent : public backends::GpuEvent {
 public:
  CudaEvent(std::shared_ptr<EventPool> pool, cudaEvent_t event)
      : pool_(std::move(pool)), event_(event) {}
  ~CudaEvent() override { pool_->release(event_); }
  void record(cudaStream_t stream, const char* what) {
    order_ = recordInOrder(event_, stream, what);
    stream_ = stream;
  }
  cudaEvent_t get() const { return event_; }
  cudaStream_t stream() const { return stream_; }
  uint64_t order() const { return order_; }
  int device() const { return pool_->device(); }

 private:
  std::shared_ptr<EventPool> pool_;
  cudaEvent_t event_;
  cudaStream_t stream_ = nullptr;
  uint64_t order_ = 0;
};

struct Slot {
  cudaStream_t stream = nullptr;      // high priority: collectives overtake compute kernels
  cudaStream_t h2d_stream = nullptr;  // host-staged path: copies back while the next chunk reduces
  void* fusion = nullptr;             // fusion buffer, fusion_bytes long
  void* aux = nullptr;                // half-size side buffer (mixed-precision cross leg), lazy
  int* nan_flag = nullptr;            // device int
  int* nan_host = nullptr;            // pinned ring of kNanRing results, one per work
  unsigned nan_next = 0;
};

// Engine thread, except events() and outputs() (any thread).
class DeviceContext {
 public:
  static constexpr unsigned kNanRing = 1024;

  DeviceContext(int device, const Params& params);
  ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  int device() const { return device_; }
  size_t fusionBytes() const { return fusion_bytes_; }
  const std::shared_ptr<EventPool>& events() const { return events_; }
  const std::shared_ptr<DeviceBlockCache>& outputs() const { return outputs_; }
  // The next slot, round robin; its fusion buffer is allocated on first use.
  Slot& nextSlot();
  // The slot's side buffer (half the fusion buffer), allocated on first use.
  void* aux(Slot& slot);
  // Pinned host memory of at least `bytes`, grown on demand; index 0 or 1 (two buffers for
  // calls with separate input and output).
  void* pinned(int index, size_t bytes);

 private:
  int device_;
  size_t fusion_bytes_;
  std::shared_ptr<EventPool> events_;
  std::shared_ptr<DeviceBlockCache> outputs_;
  std::vector<Slot> slots_;
  size_t next_slot_ = 0;
  void* pinned_[2] = {nullptr, nullptr};
  size_t pinned_bytes_[2] = {0, 0};
};

}  // namespace perseus::nccl
