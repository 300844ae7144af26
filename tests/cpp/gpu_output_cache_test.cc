// The cache of library-owned CUDA outputs (Note [Output block cache], backends/nccl/
// device_block_cache.h) on a real GPU: a dropped block is reused for the next output of its
// size class, the bound on idle bytes holds, a block dropped while a kernel still writes it is
// not handed out before that kernel ends, and blocks outlive the cache object that made them.
// Skips where there is no GPU.
#include <gtest/gtest.h>

#include "support/gpu_presence.h"

#if PERSEUS_HAVE_CUDA
#include <cuda_runtime.h>

#include <vector>

#include "backends/nccl/device_block_cache.h"

namespace perseus::nccl {
namespace {

using perseus::testing::haveGpu;

#define REQUIRE_GPU() \
  if (!haveGpu()) GTEST_SKIP() << "no CUDA device"

TEST(GpuOutputCache, SizeClassesArePowersOfTwoThenTwoMebibyteSteps) {
  EXPECT_EQ(DeviceBlockCache::sizeClass(1), 512u);
  EXPECT_EQ(DeviceBlockCache::sizeClass(513), 1024u);
  EXPECT_EQ(DeviceBlockCache::sizeClass(3000), 4096u);
  EXPECT_EQ(DeviceBlockCache::sizeClass(1 << 20), size_t{1} << 20);
  EXPECT_EQ(DeviceBlockCache::sizeClass((1 << 20) + 1), size_t{2} << 20);
  EXPECT_EQ(DeviceBlockCache::sizeClass((5 << 20) - 3), size_t{6} << 20);
}

TEST(GpuOutputCache, ADroppedBlockServesTheNextOutputOfItsClass) {
  REQUIRE_GPU();
  auto cache = std::make_shared<DeviceBlockCache>(0, size_t{64} << 20);
  void* first = nullptr;
  {
    auto block = cache->acquire(3 << 20);
    first = block.get();
    ASSERT_NE(first, nullptr);
    EXPECT_EQ(cache->idleBytes(), 0u);
  }
  EXPECT_EQ(cache->idleBytes(), size_t{4} << 20);
  auto again = cache->acquire((3 << 20) + 100);  // same 4 MiB class
  EXPECT_EQ(again.get(), first);
  EXPECT_EQ(cache->idleBytes(), 0u);
  auto other = cache->acquire(9 << 20);  // another class: a new block
  EXPECT_NE(other.get(), first);
}

TEST(GpuOutputCache, IdleBlocksStayWithinTheBound) {
  REQUIRE_GPU();
  auto cache = std::make_shared<DeviceBlockCache>(0, size_t{5} << 20);
  {
    auto a = cache->acquire(4 << 20);
    auto b = cache->acquire(4 << 20);
  }  // the second one back would make 8 MiB idle: freed instead
  EXPECT_EQ(cache->idleBytes(), size_t{4} << 20);
  auto off = std::make_shared<DeviceBlockCache>(0, 0);
  { auto c = off->acquire(1 << 20); }
  EXPECT_EQ(off->idleBytes(), 0u);
}

TEST(GpuOutputCache, ABlockComesBackOnlyAfterTheDeviceIsDoneWithIt) {
  REQUIRE_GPU();
  auto cache = std::make_shared<DeviceBlockCache>(0, size_t{64} << 20);
  const size_t n = size_t{32} << 20;
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  std::vector<char> host(n, 7);
  {
    auto block = cache->acquire(n);
    // A slow write still queued on a stream the cache knows nothing of when the block is dropped.
    for (int i = 0; i < 20; ++i) ASSERT_EQ(cudaMemsetAsync(block.get(), i, n, stream), cudaSuccess);
  }
  // The next owner writes the block and reads it back; a late memset would show through.
  auto reused = cache->acquire(n);
  ASSERT_EQ(cudaMemset(reused.get(), 0x5A, n), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(host.data(), reused.get(), n, cudaMemcpyDeviceToHost), cudaSuccess);
  for (size_t i = 0; i < n; i += 4093) ASSERT_EQ(host[i], 0x5A) << "byte " << i;
  cudaStreamDestroy(stream);
}

TEST(GpuOutputCache, BlocksOutliveTheCacheThatMadeThem) {
  REQUIRE_GPU();
  std::shared_ptr<void> block;
  {
    auto cache = std::make_shared<DeviceBlockCache>(0, size_t{64} << 20);
    block = cache->acquire(1 << 20);
  }
  ASSERT_EQ(cudaMemset(block.get(), 1, 1 << 20), cudaSuccess);
  block.reset();  // goes back to the cache it kept alive, which then frees it
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace
}  // namespace perseus::nccl

#else
TEST(GpuOutputCache, SkippedWithoutCuda) { GTEST_SKIP() << "build without CUDA"; }
#endif
