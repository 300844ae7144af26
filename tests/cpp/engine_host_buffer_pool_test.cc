// Note [Recycled outputs]: released large host outputs are reused, within bounds; Note [Huge
// output pages]: the largest are 2 MiB aligned (ASan checks that each kind is freed as it was
// allocated).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "engine/host_buffer_pool.h"

namespace perseus::engine {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

TEST(HostBufferPool, ReusesALargeBufferForASimilarSize) {
  HostBufferPool& pool = HostBufferPool::instance();
  uint8_t* first;
  {
    HostBufferPool::Buffer b = pool.take(8 * kMiB);
    first = b.get();
    b[8 * kMiB - 1] = 1;  // the whole buffer is usable
  }
  EXPECT_GE(pool.pooledBytes(), 8 * kMiB);
  HostBufferPool::Buffer again = pool.take(5 * kMiB);  // fits in twice its size: reused
  EXPECT_EQ(again.get(), first);
  HostBufferPool::Buffer other = pool.take(8 * kMiB);  // the pooled one is taken: a new one
  EXPECT_NE(other.get(), first);
}

TEST(HostBufferPool, SmallOrMuchLargerBuffersAreNotHandedOut) {
  HostBufferPool& pool = HostBufferPool::instance();
  uint8_t* big;
  {
    HostBufferPool::Buffer b = pool.take(16 * kMiB);
    big = b.get();
  }
  HostBufferPool::Buffer small = pool.take(2 * kMiB);  // 16 MiB is more than twice 2 MiB
  EXPECT_NE(small.get(), big);
  HostBufferPool::Buffer tiny = pool.take(0);  // never null, never pooled
  EXPECT_NE(tiny.get(), nullptr);
}

TEST(HostBufferPool, HoldsAtMostItsCap) {
  HostBufferPool& pool = HostBufferPool::instance();
  {
    std::vector<HostBufferPool::Buffer> held;
    for (int i = 0; i < 12; ++i) held.push_back(pool.take(64 * kMiB));
  }
  EXPECT_LE(pool.pooledBytes(), HostBufferPool::kPoolBytes);
  EXPECT_GE(pool.pooledBytes(), HostBufferPool::kPoolBytes - 64 * kMiB);
}

TEST(HostBufferPool, LargeOutputsAreAlignedForHugePagesAndRecycledAlike) {
  HostBufferPool& pool = HostBufferPool::instance();
  const size_t bytes = HostBufferPool::kHugeBytes + 1;
  uint8_t* first;
  {
    HostBufferPool::Buffer b = pool.take(bytes);
    first = b.get();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(first) % (2 * kMiB), 0u);
    EXPECT_EQ(b.get_deleter().capacity % (2 * kMiB), 0u);
    EXPECT_GE(b.get_deleter().capacity, bytes);
    b[bytes - 1] = 1;
  }
  HostBufferPool::Buffer again = pool.take(bytes);
  EXPECT_EQ(again.get(), first);
  HostBufferPool::Buffer below = pool.take(HostBufferPool::kHugeBytes - 1);  // not rounded
  EXPECT_EQ(below.get_deleter().capacity, HostBufferPool::kHugeBytes - 1);
}

}  // namespace
}  // namespace perseus::engine
