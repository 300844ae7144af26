// Times the fusion copy/cast kernels against cudaMemcpy device-to-device of the same bytes in
// the same process (counting bytes read + written), and prints one "GPUBW" line per case for
// scripts/device_check.sh: every tuning of the kernel (unroll, grid policy, wide fp16 loads) and,
// for the plain copy, the driver's copies, then one "GPUBW best" line per case. Target: >= 90%
// of the copy bandwidth. Skips where there is no GPU.
#include <gtest/gtest.h>

#include "backends/gpu_backend.h"
#include "support/gpu_presence.h"

#if PERSEUS_HAVE_CUDA
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/fusion_kernels.h"

namespace perseus::kernels::cuda {
namespace {

using perseus::testing::haveGpu;

#define CK(x) ASSERT_EQ((x), cudaSuccess) << #x

// Median time in microseconds of `body` over `reps` runs, after warm-up, timed with events.
double medianUs(const std::function<void()>& body, cudaStream_t stream, int reps = 25) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  for (int i = 0; i < 3; ++i) body();
  std::vector<float> ms;
  for (int i = 0; i < reps; ++i) {
    cudaEventRecord(a, stream);
    body();
    cudaEventRecord(b, stream);
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
      e.push_back({static_cast<char*>(src) + i * per * 4,
                   static_cast<char*>(dst) + i * per * out_elem, per, i});
    }
    return e;
  };
  auto copy_table = table(4), cast_table = table(2);
  std::vector<CopyEntry> up_table;
  for (auto e : cast_table) up_table.push_back({e.dst, const_cast<void*>(e.src), e.count, e.tag});
  // Everything on one non-default stream: cudaMemcpyBatchAsync refuses the legacy stream.
  cudaStream_t stream = nullptr;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  auto memcpyUs = [&] {
    return medianUs([&] { cudaMemcpyAsync(dst, src, total, cudaMemcpyDeviceToDevice, stream); },
                    stream);
  };
  const double memcpy_us = memcpyUs();
  const double memcpy_gbs = 2.0 * total / memcpy_us / 1e3;
  struct Case {
    const char* name;
    double bytes;  // read + written
    const std::vector<CopyEntry>* table;
    DataType from, to;
    double scale;
    int* flag;
  };
  const std::vector<Case> cases = {
      {"copy_fp32_64tensors", 2.0 * total, &copy_table, DataType::kFloat32, DataType::kFloat32, 1.0,
       nullptr},
      {"scale_fp32_64tensors", 2.0 * total, &copy_table, DataType::kFloat32, DataType::kFloat32,
       0.5, nullptr},
      {"cast_fp32_to_fp16", 1.5 * total, &cast_table, DataType::kFloat32, DataType::kFloat16, 1.0,
       nullptr},
      {"cast_scale_nancheck_fp32_to_fp16", 1.5 * total, &cast_table, DataType::kFloat32,
       DataType::kFloat16, 0.5, flag},
      {"cast_fp16_to_fp32", 1.5 * total, &up_table, DataType::kFloat16, DataType::kFloat32, 1.0,
       nullptr},
  };
  std::printf("GPUBW %-34s %-14s %12s %10s %8s %8s\n", "case", "tuning", "bytes", "us", "GB/s",
              "%memcpy");
  std::printf("GPUBW %-34s %-14s %12.0f %10.1f %8.1f %8.1f\n", "cudaMemcpy_D2D", "-", 2.0 * total,
              memcpy_us, memcpy_gbs, 100.0);
  using Grid = CopyTuning::Grid;
  std::vector<std::string> best_lines;
  for (const Case& c : cases) {
    // Every variant the kernel has for this case (Note [Batched fusion copy]), plus the
    // driver's copies for the plain copy; the shipped one is marked.
    std::vector<CopyTuning> tunings;
    const bool half_up = c.from == DataType::kFloat16 && c.to == DataType::kFloat32;
    for (bool wide : {false, true}) {
      if (wide && !half_up) continue;
      for (int u : {4, 8}) {
        for (Grid g : {Grid::kResident, Grid::kBalanced, Grid::kPerTile}) {
          CopyTuning t;
          t.unroll = u;
          t.grid = g;
          t.wide_half_loads = wide;
          tunings.push_back(t);
        }
      }
    }
    if (c.from == c.to && c.scale == 1.0 && c.flag == nullptr) {
      for (auto d : {CopyTuning::Driver::kMemcpyEach, CopyTuning::Driver::kMemcpyBatch}) {
        CopyTuning t;
        t.driver = d;
        tunings.push_back(t);
      }
    }
    const std::string shipped = tuningName(defaultTuning(c.from, c.to));
    double best_us = 1e30;
    std::string best;
    for (const CopyTuning& t : tunings) {
      const double us = medianUs(
          [&] {
            batchedCopyTuned(c.table->data(), tensors, c.from, c.to, c.scale, c.flag, stream, t);
          },
          stream);
      const double gbs = c.bytes / us / 1e3;
      const std::string name = tuningName(t);
      std::printf("GPUBW %-34s %-14s %12.0f %10.1f %8.1f %8.1f%s\n", c.name, name.c_str(), c.bytes,
                  us, gbs, 100.0 * gbs / memcpy_gbs, name == shipped ? " shipped" : "");
      // A loose floor so that a broken variant fails; the 90% target is read off the table.
      EXPECT_GT(gbs, 0.3 * memcpy_gbs) << c.name << " " << name;
      if (us < best_us) {
        best_us = us;
        best = name;
      }
    }
    char line[256];
    std::snprintf(line, sizeof(line), "GPUBW best %-29s %-14s %12.0f %10.1f %8.1f %8.1f", c.name,
                  best.c_str(), c.bytes, best_us, c.bytes / best_us / 1e3,
                  100.0 * c.bytes / best_us / 1e3 / memcpy_gbs);
    best_lines.push_back(line);
  }
  // The copy bandwidth again, after the kernels: the spread of the reference.
  const double memcpy_again = memcpyUs();
  std::printf("GPUBW %-34s %-14s %12.0f %10.1f %8.1f %8.1f\n", "cudaMemcpy_D2D_again", "-",
              2.0 * total, memcpy_again, 2.0 * total / memcpy_again / 1e3,
              100.0 * memcpy_us / memcpy_again);
  for (const auto& l : best_lines) std::printf("%s\n", l.c_str());
  CK(cudaStreamDestroy(stream));
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
