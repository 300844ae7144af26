// Blocking NCCL communicators and the launch watchdog (Note [Blocking launches],
// backends/nccl/launch_watchdog.h) on two GPUs, two ranks as threads of one process: the
// blocking twin gives exact results and its launches return at once; a rank whose peer never
// launches gets an error within PERSEUS_TIMEOUT and a bit, never a hang. Skips with fewer than
// two GPUs.
#include <gtest/gtest.h>

#include "support/gpu_presence.h"

#if PERSEUS_HAVE_CUDA
#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <thread>
#include <vector>

#include "backends/nccl/nccl_api.h"
#include "backends/nccl/nccl_comm.h"
#include "collectives/communicator.h"
#include "common/status.h"
#include "support/shm_groups.h"

namespace perseus::nccl {
namespace {

using Clock = std::chrono::steady_clock;

bool haveTwoGpus() {
  int n = 0;
  if (!perseus::testing::haveGpu() || cudaGetDeviceCount(&n) != cudaSuccess) return false;
  return n >= 2 && ncclApi() != nullptr;
}

#define REQUIRE_TWO_GPUS() \
  if (!haveTwoGpus()) GTEST_SKIP() << "needs two CUDA devices and NCCL"

// Runs body(rank, communicator) on two threads, rank r on GPU r, after both made the NCCL
// communicator over a shared-memory CPU communicator; fails the test with any rank's error.
void runTwoRanks(const std::string& name, double timeout_s,
                 const std::function<void(int, NcclComm&)>& body) {
  Params params = perseus::testing::shmTestParams();
  params.timeout_s = timeout_s;
  const auto errors = perseus::testing::runOnShmCommunicators(
      2, name + std::to_string(getpid()), params, [&](int rank, collectives::Communicator& cpu) {
        ASSERT_EQ(cudaSetDevice(rank), cudaSuccess);
        auto comm = NcclComm::create(cpu, rank, timeout_s, name);
        body(rank, *comm);
      });
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

TEST(GpuLaunchWatchdog, BlockingTwinAllreducesExactly) {
  REQUIRE_TWO_GPUS();
  runTwoRanks("twin", 30, [](int rank, NcclComm& c) {
    const size_t n = (1 << 20) + 3;
    std::vector<float> host(n);
    for (size_t i = 0; i < n; ++i) host[i] = static_cast<float>((i % 97) + rank);
    float* buf = nullptr;
    ASSERT_EQ(cudaMalloc(&buf, n * sizeof(float)), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(buf, host.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
    cudaStream_t stream = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    const NcclApi& api = *ncclApi();
    std::vector<double> launch_us;
    for (int round = 0; round < 20; ++round) {
      const auto t0 = Clock::now();
      c.run("ncclAllReduce", [&] {
        return api.allReduce(buf, buf, round == 0 ? n : 1, ncclFloat32, ncclSum, c.get(), stream);
      });
      launch_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      if (round == 0) {
        ASSERT_EQ(cudaMemcpy(host.data(), buf, n * sizeof(float), cudaMemcpyDeviceToHost),
                  cudaSuccess);
        for (size_t i = 0; i < n; i += 4099)
          ASSERT_EQ(host[i], static_cast<float>(2 * (i % 97) + 1)) << i;
      }
    }
    std::sort(launch_us.begin() + 1, launch_us.end());
    if (rank == 0) std::printf("GPUWATCHDOG blocking launch 4B median_us=%.1f\n", launch_us[10]);
    cudaStreamDestroy(stream);
    cudaFree(buf);
  });
}

TEST(GpuLaunchWatchdog, APeerThatNeverLaunchesFailsTheOtherInTime) {
  REQUIRE_TWO_GPUS();
  constexpr double kTimeout = 3;
  std::atomic<bool> rank0_done{false};
  runTwoRanks("stuck", kTimeout, [&](int rank, NcclComm& c) {
    float* buf = nullptr;
    ASSERT_EQ(cudaMalloc(&buf, 1 << 20), cudaSuccess);
    cudaStream_t stream = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    if (rank == 0) {
      const auto t0 = Clock::now();
      std::string outcome = "returned";
      try {
        c.run("ncclAllReduce", [&] {
          return ncclApi()->allReduce(buf, buf, 1 << 18, ncclFloat32, ncclSum, c.get(), stream);
        });
        // The launch did not need the peer (connections made at creation): the kernel waits
        // on the device instead, where GpuWork's deadline catches it; not this test's subject.
        c.abort();
      } catch (const TimeoutError& e) {
        outcome = std::string("TimeoutError: ") + e.what();
      }
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      std::printf("GPUWATCHDOG stuck peer: %s after %.2f s\n", outcome.c_str(), s);
      EXPECT_LT(s, kTimeout + 2.0);
      rank0_done = true;
    } else {
      while (!rank0_done) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      c.abort();
    }
    (void)cudaStreamSynchronize(stream);
    cudaStreamDestroy(stream);
    cudaFree(buf);
  });
}

}  // namespace
}  // namespace perseus::nccl

#else
TEST(GpuLaunchWatchdog, SkippedWithoutCuda) { GTEST_SKIP() << "build without CUDA"; }
#endif
