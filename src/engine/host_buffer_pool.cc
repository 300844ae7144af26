#include "engine/host_buffer_pool.h"

#include <sys/mman.h>

#include <cstdlib>
#include <new>

namespace perseus::engine {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;

// Note [Huge output pages]: an output of kHugeBytes or more is 2 MiB aligned and advised onto
// transparent huge pages (where the kernel leaves THP to madvise, as most distributions do),
// as NumPy does for its large arrays: the cross-memory reads that fill an allgather's output
// pin its pages one by one, and 512 times fewer pages cost fewer walks. Its capacity, a
// multiple of 2 MiB, says how it was allocated.
bool isHuge(size_t capacity) { return capacity >= HostBufferPool::kHugeBytes; }

uint8_t* allocate(size_t capacity) {
  if (!isHuge(capacity)) return new uint8_t[capacity];
  void* p = std::aligned_alloc(kHugePage, capacity);
  if (p == nullptr) throw std::bad_alloc();
  (void)madvise(p, capacity, MADV_HUGEPAGE);  // a hint: without THP, plain pages
  return static_cast<uint8_t*>(p);
}

void deallocate(uint8_t* p, size_t capacity) {
  if (isHuge(capacity)) {
    std::free(p);
  } else {
    delete[] p;
  }
}

size_t capacityFor(size_t bytes) {
  return isHuge(bytes) ? (bytes + kHugePage - 1) / kHugePage * kHugePage : bytes;
}

}  // namespace

HostBufferPool& HostBufferPool::instance() {
  static HostBufferPool* pool = new HostBufferPool;  // see the header: never destroyed
  return *pool;
}

void HostBufferPool::Deleter::operator()(uint8_t* p) const {
  if (p == nullptr) return;
  if (capacity >= kMinPooledBytes) {
    HostBufferPool::instance().give(p, capacity);
  } else {
    deallocate(p, capacity);
  }
}

HostBufferPool::Buffer HostBufferPool::take(size_t bytes) {
  bytes = bytes > 0 ? bytes : 1;
  if (bytes >= kMinPooledBytes) {
    std::lock_guard<std::mutex> lock(mu_);
    auto best = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->first >= bytes && it->first / 2 <= bytes &&
          (best == free_.end() || it->first < best->first)) {
        best = it;
      }
    }
    if (best != free_.end()) {
      Buffer b(best->second, Deleter{best->first});
      pooled_bytes_ -= best->first;
      free_.erase(best);
      return b;
    }
  }
  const size_t capacity = capacityFor(bytes);
  return Buffer(allocate(capacity), Deleter{capacity});
}

void HostBufferPool::give(uint8_t* p, size_t capacity) {
  std::lock_guard<std::mutex> lock(mu_);
  if (capacity > kPoolBytes) {
    deallocate(p, capacity);
    return;
  }
  free_.emplace_back(capacity, p);
  pooled_bytes_ += capacity;
  while (pooled_bytes_ > kPoolBytes) {
    pooled_bytes_ -= free_.front().first;
    deallocate(free_.front().second, free_.front().first);
    free_.pop_front();
  }
}

size_t HostBufferPool::pooledBytes() {
  std::lock_guard<std::mutex> lock(mu_);
  return pooled_bytes_;
}

}  // namespace perseus::engine
