// Times the fusion copy/cast kernels against cudaMemcpy device-to-device of the same bytes in
// the same process (counting bytes read + written), and prints one "GPUBW" line per case for
// scripts/device_check.sh. Target: >= 90% of the copy bandwidth. Skips where there is no GPU.
#include <gtest/gtest.h>

#include "backends/gpu_backend.h"

#if PERSEUS_HAVE_CUDA
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <random>
#include <vector>

#include "kernels/cuda/fusion_kernels.h"

namespace perseus::kernels::cuda {
namespace {

bool haveGpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define CK(x) ASSERT_EQ((x), cudaSuccess) << #x

// Median time in microseconds of `body` over `reps` runs, after warm-up, timed with events.
double medianUs(const std::function<void()>& body, int reps = 25) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  for (int i = 0; i < 3; ++i) body();
  std::vector<float> ms;
  for (int i = 0; i < reps; ++i) {
    cudaEventRecord(a);
    body();
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float t = 0;
    cudaEventElapsedTime(&t, a, b);
    ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2] * 1000.0;
}

TEST(GpuFusionBandwidth, KernelsAgainstDeviceCopy) {
  if (!haveGpu()) GTEST_SKIP() << "no CUDA device";
  const size_t total = size_t{256} << 20;  // bytes of fp32 input: several times the L2
  const int tensors = 64;
  const size_t per = total / tensors / 4;  // floats per tensor
  void *src = nullptr, *dst = nullptr;
  CK(cudaMalloc(&src, total));
  CK(cudaMalloc(&dst, total));
  {
    std::vector<float> host(total / 4);
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> d(-1.f, 1.f);
    for (auto& x : host) x = d(rng);
    CK(cudaMemcpy(src, host.data(), total, cudaMemcpyHostToDevice));
  }
  int* flag = nullptr;
  CK(cudaMalloc(&flag, sizeof(int)));
  auto table = [&](size_t out_elem) {
    std::vector<CopyEntry> e;
    for (int i = 0; i < tensors; ++i) {
      e.push_back({static_cast<char*>(src) + i * per * 4, static_cast<char*>(dst) + i * per * out_elem, per, i});
    }
    return e;
  };
  auto copy_table = table(4), cast_table = table(2);
  std::vector<CopyEntry> up_table;
  for (auto e : cast_table) up_table.push_back({e.dst, const_cast<void*>(e.src), e.count, e.tag});
  int unroll = kDefaultUnroll;

  const double memcpy_us = medianUs([&] { cudaMemcpyAsync(dst, src, total, cudaMemcpyDeviceToDevice); });
  const double memcpy_gbs = 2.0 * total / memcpy_us / 1e3;
  struct Case {
    const char* name;
    double bytes;  // read + written
    std::function<void()> body;
  };
  std::vector<Case> cases = {
      {"copy_fp32_64tensors", 2.0 * total,
       [&] { batchedCopyUnrolled(copy_table.data(), tensors, DataType::kFloat32, DataType::kFloat32, 1.0, nullptr, nullptr, unroll); }},
      {"scale_fp32_64tensors", 2.0 * total,
       [&] { batchedCopyUnrolled(copy_table.data(), tensors, DataType::kFloat32, DataType::kFloat32, 0.5, nullptr, nullptr, unroll); }},
      {"cast_fp32_to_fp16", 1.5 * total,
       [&] { batchedCopyUnrolled(cast_table.data(), tensors, DataType::kFloat32, DataType::kFloat16, 1.0, nullptr, nullptr, unroll); }},
      {"cast_scale_nancheck_fp32_to_fp16", 1.5 * total,
       [&] { batchedCopyUnrolled(cast_table.data(), tensors, DataType::kFloat32, DataType::kFloat16, 0.5, flag, nullptr, unroll); }},
      {"cast_fp16_to_fp32", 1.5 * total,
       [&] { batchedCopyUnrolled(up_table.data(), tensors, DataType::kFloat16, DataType::kFloat32, 1.0, nullptr, nullptr, unroll); }},
  };
  std::printf("GPUBW %-34s %12s %10s %8s %8s\n", "case", "bytes", "us", "GB/s", "%memcpy");
  std::printf("GPUBW %-34s %12.0f %10.1f %8.1f %8.1f\n", "cudaMemcpy_D2D", 2.0 * total, memcpy_us, memcpy_gbs, 100.0);
  for (int u : {4, 8}) {
    unroll = u;
    for (auto& c : cases) {
      const double us = medianUs(c.body);
      const double gbs = c.bytes / us / 1e3;
      std::printf("GPUBW %-28s_u%d %12.0f %10.1f %8.1f %8.1f\n", c.name, u, c.bytes, us, gbs,
                  100.0 * gbs / memcpy_gbs);
      // A loose floor so that a broken kernel fails; the 90% target is read off the table.
      EXPECT_GT(gbs, 0.5 * memcpy_gbs) << c.name;
    }
  }
  // The copy bandwidth again, after the kernels: the spread of the reference.
  const double memcpy_again = medianUs([&] { cudaMemcpyAsync(dst, src, total, cudaMemcpyDeviceToDevice); });
  std::printf("GPUBW %-34s %12.0f %10.1f %8.1f\n", "cudaMemcpy_D2D_again", 2.0 * total, memcpy_again,
              2.0 * total / memcpy_again / 1e3);
  CK(cudaGetLastError());
  cudaFree(flag);
  cudaFree(src);
  cudaFree(dst);
}

}  // namespace
}  // namespace perseus::kernels::cuda

#else
TEST(GpuFusionBandwidth, SkippedWithoutCuda) { GTEST_SKIP() << "build without CUDA"; }
#endif
