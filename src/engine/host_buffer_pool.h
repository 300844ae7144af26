// Note [Recycled outputs]
// Library-allocated host outputs (allgather, alltoall, reducescatter) live as long as the
// user's handle. glibc maps every allocation above its mmap threshold (at most 32 MiB) afresh
// and unmaps it on free, so each call faulted its whole output in, page by page: a 2-rank
// allgather ran at 5.3 GB/s with a 16 MiB output and at 0.7-0.85 GB/s with 64 and 256 MiB ones
// (docs/algorithms.md). Released buffers of kMinPooledBytes or more are therefore kept, up to
// kPoolBytes in all (the oldest go first), and reused for the next output that fits in at most
// twice its size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>

namespace perseus::engine {

class HostBufferPool {
 public:
  static constexpr size_t kMinPooledBytes = size_t{1} << 20;
  static constexpr size_t kPoolBytes = size_t{512} << 20;
  // Outputs of this size or more sit on huge pages (Note [Huge output pages]).
  static constexpr size_t kHugeBytes = size_t{4} << 20;

  struct Deleter {
    size_t capacity = 0;
    void operator()(uint8_t* p) const;
  };
  using Buffer = std::unique_ptr<uint8_t[], Deleter>;

  // Process-wide; never destroyed, so handles released during exit still have it.
  static HostBufferPool& instance();

  // A buffer of at least `bytes` (and at least 1). Thread-safe.
  Buffer take(size_t bytes);
  size_t pooledBytes();

 private:
  void give(uint8_t* p, size_t capacity);

  std::mutex mu_;
  std::deque<std::pair<size_t, uint8_t*>> free_;  // (capacity, buffer), oldest first
  size_t pooled_bytes_ = 0;
};

}  // namespace perseus::engine
