// World-size-1 allreduce through the C API and the engine, timed from C++ (no Python): the
// part of bench/gpu/allreduce_world1.py's figure that is engine + backend, phase by phase, for
// a 1-element CUDA tensor and a 1-element CPU tensor. Prints "GPUCAPI" lines; the Python
// breakdown minus these is the Python layer's cost. Exits 77 where there is no GPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <vector>

#include "common/status.h"
#include "perseus/c_api.h"
#include "support/gpu_presence.h"

namespace {

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
    PERSEUS_CHECK(perseus_allreduce("lat", &t, &t, PERSEUS_SUM, 1.0, 1.0, 0, &h) == PERSEUS_OK,
                  << perseus_last_error());
    const auto t1 = Clock::now();
    PERSEUS_CHECK(perseus_wait(h, 30) == PERSEUS_OK, << perseus_last_error());
    const auto t2 = Clock::now();
    if (cuda) {
      PERSEUS_CHECK(perseus_handle_cuda_stream_wait(h, stream) == PERSEUS_OK,
                    << perseus_last_error());
    }
    const auto t3 = Clock::now();
    if (cuda) {
      PERSEUS_CHECK(cudaStreamSynchronize(stream) == cudaSuccess);
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
  std::printf(
      "GPUCAPI allreduce world1 %s submit_us=%.1f wait_us=%.1f stream_wait_us=%.1f "
      "sync_us=%.1f total_us=%.1f\n",
      what, median(submit), median(wait), median(sw), median(sync), median(total));
}

// Back to back, as torch.distributed's blocking dist.all_reduce runs (the Python extension's
// allreduce_on_stream): submit, make the producer stream wait on the handle, release; one
// synchronize at the end. Beside it, the CUDA calls such a collective cannot avoid at world
// size 1 (Note [World size one]): the ready event recorded on the producer stream and the
// producer stream's wait on it. Their difference is the engine's own cost per call.
void backToBack(perseus_tensor t, cudaStream_t stream, int calls) {
  using Clock = std::chrono::steady_clock;
  auto perCall = [&](auto&& body) {
    std::vector<double> rounds;
    for (int r = 0; r < 7; ++r) {
      const auto t0 = Clock::now();
      for (int i = 0; i < calls; ++i) body();
      PERSEUS_CHECK(cudaStreamSynchronize(stream) == cudaSuccess);
      rounds.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() /
                       calls);
    }
    return median(rounds);
  };
  cudaEvent_t event = nullptr;
  PERSEUS_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming) == cudaSuccess);
  const double floor = perCall([&] {
    PERSEUS_CHECK(cudaEventRecord(event, stream) == cudaSuccess);
    PERSEUS_CHECK(cudaStreamWaitEvent(stream, event, 0) == cudaSuccess);
  });
  const double engine = perCall([&] {
    perseus_handle h;
    PERSEUS_CHECK(perseus_allreduce("b2b", &t, &t, PERSEUS_SUM, 1.0, 1.0, 0, &h) == PERSEUS_OK,
                  << perseus_last_error());
    PERSEUS_CHECK(perseus_handle_cuda_stream_wait(h, stream) == PERSEUS_OK,
                  << perseus_last_error());
    perseus_release(h);
  });
  // The same three steps as one call with no handle in the table.
  const double fused = perCall([&] {
    PERSEUS_CHECK(
        perseus_allreduce_on_stream("b2b", &t, &t, PERSEUS_SUM, 1.0, 1.0, 0, stream) == PERSEUS_OK,
        << perseus_last_error());
  });
  cudaEventDestroy(event);
  std::printf(
      "GPUCAPI back_to_back world1 cuda_1elem calls=%d on_stream_us=%.2f "
      "cuda_floor_us=%.2f engine_over_floor_us=%.2f allreduce_on_stream_us=%.2f\n",
      calls, engine, floor, engine - floor, fused);
}

void run(int back_to_back_calls) {
  PERSEUS_CHECK(perseus_init() == PERSEUS_OK, << perseus_last_error());
  cudaStream_t stream = nullptr;
  PERSEUS_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  float* d = nullptr;
  PERSEUS_CHECK(cudaMalloc(&d, sizeof(float)) == cudaSuccess);
  PERSEUS_CHECK(cudaMemset(d, 0, sizeof(float)) == cudaSuccess);
  int64_t shape[1] = {1};
  report("cuda_1elem", perseus_tensor{d, PERSEUS_FLOAT32, 1, shape, 0, stream}, stream, 500);
  backToBack(perseus_tensor{d, PERSEUS_FLOAT32, 1, shape, 0, stream}, stream, back_to_back_calls);
  float h = 0;
  report("cpu_1elem", perseus_tensor{&h, PERSEUS_FLOAT32, 1, shape, PERSEUS_DEVICE_CPU, nullptr},
         stream, 500);
  // The empty synchronize alone: what sync_us costs with nothing to wait for.
  std::vector<double> empty;
  for (int i = 0; i < 200; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    cudaStreamSynchronize(stream);
    empty.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  std::printf("GPUCAPI empty cudaStreamSynchronize_us=%.1f\n", median(empty));
  cudaFree(d);
  cudaStreamDestroy(stream);
  perseus_shutdown();
}

}  // namespace

// argv[1]: calls per round of the back-to-back loop (default 2000; more, for a profiler).
int main(int argc, char** argv) {
  if (!perseus::testing::haveGpu()) {
    std::fprintf(stderr, "gpu_capi_phases_bench: no CUDA device\n");
    return 77;
  }
  try {
    run(argc > 1 ? std::atoi(argv[1]) : 2000);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_capi_phases_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
