#include "engine/host_buffer_pool.h"

namespace perseus::engine {

HostBufferPool& HostBufferPool::instance() {
  static HostBufferPool* pool = new HostBufferPool;  // see the header: never destroyed
  return *pool;
}

void HostBufferPool::Deleter::operator()(uint8_t* p) const {
  if (p == nullptr) return;
  if (capacity >= kMinPooledBytes) {
    HostBufferPool::instance().give(p, capacity);
  } else {
    delete[] p;
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
  return Buffer(new uint8_t[bytes], Deleter{bytes});
}

void HostBufferPool::give(uint8_t* p, size_t capacity) {
  std::lock_guard<std::mutex> lock(mu_);
  if (capacity > kPoolBytes) {
    delete[] p;
    return;
  }
  free_.emplace_back(capacity, p);
  pooled_bytes_ += capacity;
  while (pooled_bytes_ > kPoolBytes) {
    pooled_bytes_ -= free_.front().first;
    delete[] free_.front().second;
    free_.pop_front();
  }
}

size_t HostBufferPool::pooledBytes() {
  std::lock_guard<std::mutex> lock(mu_);
  return pooled_bytes_;
}

}  // namespace perseus::engine
