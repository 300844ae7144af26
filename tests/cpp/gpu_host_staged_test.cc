// Two ranks on one GPU (threads of one process, each with its own transport, communicator and
// backend): NCCL refuses that, so the backend must pick the host-staged data plane by itself
// and give exact results for every collective. Skips without a GPU. The staged path's latency,
// bandwidth and pipeline split are measured by bench/gpu/gpu_host_staged_bench.cc.
#include <gtest/gtest.h>

#include "backends/gpu_backend.h"
#include "support/gpu_presence.h"

#if PERSEUS_HAVE_CUDA
#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "collectives/collectives.h"
#include "collectives/communicator.h"
#include "support/gpu_ranks.h"
#include "support/shm_groups.h"

namespace perseus::backends {
namespace {

using perseus::testing::haveGpu;

using perseus::testing::runTwoRanksOnOneGpu;

Params stagedParams() {
  Params p = testing::shmTestParams();
  p.timeout_s = 30;
  p.shm_ring_bytes = 4 << 20;
  p.shm_slot_bytes = 1 << 20;
  return p;
}

std::vector<float> pattern(int rank, size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>((i * 7 + rank * 13) % 101) - 50.0f;
  return v;
}

class GpuHostStaged : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!haveGpu()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_F(GpuHostStaged, AllreduceSingleAndFused) {
  Params p = stagedParams();
  p.fusion_threshold = 1 << 20;
  runTwoRanksOnOneGpu(
      "gpustaged1", p, [](int rank, collectives::Communicator& comm, GpuBackend& backend) {
        const std::vector<size_t> counts = {3, 1 << 20, 1000, 5};  // 4 MiB tensor: several chunks
        std::vector<float*> bufs;
        GpuBatch fused;
        for (size_t i = 0; i < counts.size(); ++i) {
          float* b = nullptr;
          ASSERT_EQ(cudaMalloc(&b, counts[i] * 4), cudaSuccess);
          auto h = pattern(rank, counts[i]);
          cudaMemcpy(b, h.data(), counts[i] * 4, cudaMemcpyHostToDevice);
          bufs.push_back(b);
          fused.tensors.push_back(
              {"t" + std::to_string(i), b, b, counts[i], backend.recordReady(0, nullptr)});
        }
        GpuBatch single;
        single.tensors.push_back(fused.tensors[1]);
        fused.tensors.erase(fused.tensors.begin() + 1);
        backend.allreduce(comm, single, ReduceOp::kSum, 1.0, 0.5)->wait();
        backend.allreduce(comm, fused, ReduceOp::kSum, 2.0, 1.0)->wait();
        EXPECT_EQ(backend.dataPlane(comm, 0), "host-staged");
        for (size_t i = 0; i < counts.size(); ++i) {
          std::vector<float> got(counts[i]);
          cudaMemcpy(got.data(), bufs[i], counts[i] * 4, cudaMemcpyDeviceToHost);
          auto a = pattern(0, counts[i]), b = pattern(1, counts[i]);
          const float scale = i == 1 ? 0.5f : 2.0f;
          for (size_t k = 0; k < counts[i]; ++k)
            ASSERT_EQ(got[k], (a[k] + b[k]) * scale) << i << ":" << k;
          cudaFree(bufs[i]);
        }
      });
}

TEST_F(GpuHostStaged, OtherCollectives) {
  runTwoRanksOnOneGpu(
      "gpustaged2", stagedParams(),
      [](int rank, collectives::Communicator& comm, GpuBackend& backend) {
        const size_t n = 1000;
        auto mine = pattern(rank, n);
        auto in = backend.allocate(0, n * 4);
        cudaMemcpy(in.get(), mine.data(), n * 4, cudaMemcpyHostToDevice);
        GpuTensor t{"x", in.get(), nullptr, n, nullptr};
        auto a = pattern(0, n), b = pattern(1, n);

        // allgatherv with uneven parts: rank 0 gives 10 floats, rank 1 gives 1000.
        auto out = backend.allocate(0, 2 * n * 4);
        backend.allgatherv(comm, 0, t, out.get(), {40, n * 4})->wait();
        std::vector<float> got(10 + n);
        cudaMemcpy(got.data(), out.get(), got.size() * 4, cudaMemcpyDeviceToHost);
        EXPECT_TRUE(std::equal(a.begin(), a.begin() + 10, got.begin()));
        EXPECT_TRUE(std::equal(b.begin(), b.end(), got.begin() + 10));

        t.output = out.get();
        backend.broadcast(comm, 0, t, n * 4, 1)->wait();
        got.assign(n, 0);
        cudaMemcpy(got.data(), out.get(), n * 4, cudaMemcpyDeviceToHost);
        EXPECT_EQ(got, b);

        // alltoallv: rank r sends the first half to rank 0 and the second to rank 1.
        backend.alltoallv(comm, 0, t, {n * 2, n * 2}, out.get(), {n * 2, n * 2})->wait();
        cudaMemcpy(got.data(), out.get(), n * 4, cudaMemcpyDeviceToHost);
        const size_t h = n / 2;
        for (size_t k = 0; k < h; ++k) {
          ASSERT_EQ(got[k], rank == 0 ? a[k] : a[h + k]);
          ASSERT_EQ(got[h + k], rank == 0 ? b[k] : b[h + k]);
        }

        backend
            .reducescatterv(comm, 0, DataType::kFloat32, t, out.get(), {300, 700}, ReduceOp::kSum,
                            1.0, 2.0)
            ->wait();
        const size_t off = rank == 0 ? 0 : 300, cnt = rank == 0 ? 300 : 700;
        got.assign(cnt, 0);
        cudaMemcpy(got.data(), out.get(), cnt * 4, cudaMemcpyDeviceToHost);
        for (size_t k = 0; k < cnt; ++k) ASSERT_EQ(got[k], (a[off + k] + b[off + k]) * 2.0f);
      });
}

}  // namespace
}  // namespace perseus::backends

#else
TEST(GpuHostStaged, SkippedWithoutCuda) { GTEST_SKIP() << "build without CUDA"; }
#endif
