// World-size-1 allreduce through the C API and the engine, timed from C++ (no Python): the
// part of bench/gpu/allreduce_world1.py's figure that is engine + backend, phase by phase, for
// a 1-element CUDA tensor and a 1-element CPU tensor. Prints "GPUCAPI" lines for
// scripts/device_check.sh; the Python breakdown minus these is the Python layer's cost.
// Skips where there is no GPU.
#include <gtest/gtest.h>

#include "backends/gpu_backend.h"
#include "support/gpu_presence.h"

#if PERSEUS_HAVE_CUDA
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "perseus/c_api.h"

namespace {

using perseus::testing::haveGpu;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Phases of one in-place Sum allreduce of `t` (median microseconds over reps):
// submit = perseus_allreduce, wait = perseus_wait, stream = perseus_handle_cuda_stream_wait
// (CUDA only), sync = cudaStreamSynchronize of the producer stream (CUDA only).
void report(const char* what, perseus_tensor t, cudaStream_t stream, int reps) {
  using Clock = std::chrono::steady_clock;
  auto us = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::micro>(b - a).count();
  };
  std::vector<double> submit, wait, sw, sync, total;
  const bool cuda = t.device >= 0;
  for (int i = 0; i < reps + 10; ++i) {
    perseus_handle h;
    const auto t0 = Clock::now();
    ASSERT_EQ(perseus_allreduce("lat", &t, &t, PERSEUS_SUM, 1.0, 1.0, 0, &h), PERSEUS_OK)
        << perseus_last_error();
    const auto t1 = Clock::now();
    ASSERT_EQ(perseus_wait(h, 30), PERSEUS_OK) << perseus_last_error();
    const auto t2 = Clock::now();
    if (cuda) {
      ASSERT_EQ(perseus_handle_cuda_stream_wait(h, stream), PERSEUS_OK);
    }
    const auto t3 = Clock::now();
    if (cuda) {
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    }
    const auto t4 = Clock::now();
    perseus_release(h);
    if (i < 10) continue;
    submit.push_back(us(t0, t1));
    wait.push_back(us(t1, t2));
    sw.push_back(us(t2, t3));
    sync.push_back(us(t3, t4));
    total.push_back(us(t0, t4));
  }
  std::printf("GPUCAPI allreduce world1 %s submit_us=%.1f wait_us=%.1f stream_wait_us=%.1f "
              "sync_us=%.1f total_us=%.1f\n",
              what, median(submit), median(wait), median(sw), median(sync), median(total));
}

TEST(GpuCapiLatency, ReportWorld1Phases) {
  if (!haveGpu()) GTEST_SKIP() << "no CUDA device";
  ASSERT_EQ(perseus_init(), PERSEUS_OK) << perseus_last_error();
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemset(d, 0, sizeof(float)), cudaSuccess);
  int64_t shape[1] = {1};
  report("cuda_1elem", perseus_tensor{d, PERSEUS_FLOAT32, 1, shape, 0, stream}, stream, 500);
  float h = 0;
  report("cpu_1elem", perseus_tensor{&h, PERSEUS_FLOAT32, 1, shape, PERSEUS_DEVICE_CPU, nullptr},
         stream, 500);
  // The empty synchronize alone: what sync_us costs with nothing to wait for.
  std::vector<double> empty;
  for (int i = 0; i < 200; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    cudaStreamSynchronize(stream);
    empty.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  std::printf("GPUCAPI empty cudaStreamSynchronize_us=%.1f\n", median(empty));
  cudaFree(d);
  cudaStreamDestroy(stream);
  perseus_shutdown();
}

}  // namespace

#else
TEST(GpuCapiLatency, SkippedWithoutCuda) { GTEST_SKIP() << "build without CUDA"; }
#endif
