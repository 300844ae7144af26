// Note [Output block cache]
// Library-owned CUDA outputs (allgather, alltoall, reducescatter) were cudaMalloc'ed per call
// and cudaFree'd when the framework dropped the tensor; the allocation and the unmapping cost
// more than the collective itself at 1 MiB - 1 GiB on 2 GPUs (allgather and reducescatter at
// 14-48% of NCCL's bus bandwidth, docs/perf/gpu.md). A dropped block now goes back to a
// per-device cache, keyed by its rounded size, and the next output of that size reuses it.
//
// What cudaFree promised is kept: it returns only once the device has finished all work
// issued before it, so a framework may drop a tensor while a kernel on any of its streams
// still reads it. We cannot know those streams (the tensor crossed through DLPack), so a
// returning block waits for the device the same way (cudaDeviceSynchronize) before anyone
// can write it again: what the cache saves is the allocation and the unmapping, not that wait.
// Idle blocks are bounded (PERSEUS_GPU_OUTPUT_CACHE_BYTES); a block that would exceed the bound
// is freed, and when cudaMalloc runs out of memory the idle blocks are freed and it is tried
// once more. Thread-safe: blocks come back from whatever thread drops the tensor, and a
// returned block keeps the cache alive, so it may outlive the backend.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>

namespace perseus::nccl {

class DeviceBlockCache : public std::enable_shared_from_this<DeviceBlockCache> {
 public:
  // idle_limit: bytes of idle blocks kept; 0 frees every block when it comes back.
  DeviceBlockCache(int device, size_t idle_limit) : device_(device), idle_limit_(idle_limit) {}
  ~DeviceBlockCache();
  DeviceBlockCache(const DeviceBlockCache&) = delete;
  DeviceBlockCache& operator=(const DeviceBlockCache&) = delete;

  // Device memory of at least `bytes` (at least 1), returned to the cache when the last
  // reference goes. Throws InternalError when the device has no room even without idle blocks.
  std::shared_ptr<void> acquire(size_t bytes);

  size_t idleBytes() const;
  // The size class a request of `bytes` is served from: powers of two up to 1 MiB, then
  // multiples of 2 MiB (a varying first dimension reuses blocks, waste stays under 2 MiB).
  static size_t sizeClass(size_t bytes);

 private:
  void release(void* block, size_t size) noexcept;
  void freeIdle();

  const int device_;
  const size_t idle_limit_;
  mutable std::mutex mutex_;
  std::multimap<size_t, void*> idle_;  // size class -> blocks
  size_t idle_bytes_ = 0;
};

// The default bound on idle blocks when PERSEUS_GPU_OUTPUT_CACHE_BYTES is -1: a sixteenth of
// the device's memory.
size_t defaultOutputCacheBytes(int device);

}  // namespace perseus::nccl
