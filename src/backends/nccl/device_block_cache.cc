#include "backends/nccl/device_block_cache.h"

#include <cuda_runtime.h>

#include <vector>

#include "backends/nccl/cuda_util.h"
#include "common/logging.h"

namespace perseus::nccl {

DeviceBlockCache::~DeviceBlockCache() {
  try {
    freeIdle();
  } catch (...) {
    // As in release(): nothing to give back once CUDA is gone.
  }
}

size_t DeviceBlockCache::sizeClass(size_t bytes) {
  constexpr size_t kLargeStep = size_t{2} << 20;
  if (bytes <= 512) return 512;
  if (bytes <= (size_t{1} << 20)) {
    size_t c = 1024;
    while (c < bytes) c <<= 1;
    return c;
  }
  return (bytes + kLargeStep - 1) / kLargeStep * kLargeStep;
}

std::shared_ptr<void> DeviceBlockCache::acquire(size_t bytes) {
  const size_t size = sizeClass(bytes);
  void* block = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = idle_.find(size);
    if (it != idle_.end()) {
      block = it->second;
      idle_.erase(it);
      idle_bytes_ -= size;
    }
  }
  if (block == nullptr) {
    DeviceGuard guard(device_);
    cudaError_t err = cudaMalloc(&block, size);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // not sticky, but would be reported by the next check
      freeIdle();
      err = cudaMalloc(&block, size);
    }
    checkCuda(err, "cudaMalloc (collective output)");
  }
  auto self = shared_from_this();
  return std::shared_ptr<void>(block, [self, size](void* p) { self->release(p, size); });
}

void DeviceBlockCache::release(void* block, size_t size) noexcept {
  try {
    DeviceGuard guard(device_);
    // Note [Output block cache]: the device finishes every reader before the block is reused.
    const bool synced = idle_limit_ > 0 && cudaDeviceSynchronize() == cudaSuccess;
    if (synced) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (idle_bytes_ + size <= idle_limit_) {
        idle_.emplace(size, block);
        idle_bytes_ += size;
        return;
      }
    }
    (void)cudaFree(block);
  } catch (...) {
    // CUDA is already torn down (process exit): the context took the memory with it.
  }
}

void DeviceBlockCache::freeIdle() {
  std::vector<void*> blocks;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [size, block] : idle_) blocks.push_back(block);
    idle_.clear();
    idle_bytes_ = 0;
  }
  if (blocks.empty()) return;
  DeviceGuard guard(device_);
  for (void* b : blocks) (void)cudaFree(b);
  PERSEUS_LOG(DEBUG, kCuda) << "freed " << blocks.size() << " idle output blocks on device "
                            << device_;
}

size_t DeviceBlockCache::idleBytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return idle_bytes_;
}

size_t defaultOutputCacheBytes(int device) {
  DeviceGuard guard(device);
  size_t free_bytes = 0, total = 0;
  if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return total / 16;
}

}  // namespace perseus::nccl
