// Two ranks on one GPU (threads of one process, each with its own transport, communicator and
// backend): NCCL refuses that, so the backend must pick the host-staged data plane by itself
// and give exact results for every collective. Also prints the staged allreduce's latency and
// bandwidth ("GPUSTAGED" lines) for scripts/device_check.sh. Skips without a GPU.
#include <gtest/gtest.h>

#include "backends/gpu_backend.h"
#include "support/gpu_presence.h"

#if PERSEUS_HAVE_CUDA
#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>

#include "collectives/collectives.h"
#include "collectives/communicator.h"
#include "backends/nccl/device_context.h"
#include "backends/nccl/host_staged.h"
#include "support/shm_groups.h"

namespace perseus::backends {
namespace {

using perseus::testing::haveGpu;

// Runs body(rank, comm, backend) on two threads, both on GPU 0.
void runTwoRanks(const std::string& name, Params params,
                 const std::function<void(int, collectives::Communicator&, GpuBackend&)>& body) {
  auto groups = testing::createShmGroupsAsThreads(2, name + std::to_string(getpid()), params);
  std::vector<std::unique_ptr<transport::ChannelTransport>> transports;
  for (int r = 0; r < 2; ++r) transports.push_back(testing::makeShmTransport(*groups[r], r, 2, params));
  std::exception_ptr error;
  std::mutex mutex;
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      try {
        cudaSetDevice(0);
        collectives::Communicator comm(transports[r].get(), groups[r]->arena.get(), {0, 1}, 0, params);
        GpuBackendOptions o;
        o.params = params;
        o.rank = r;
        o.hostnames = {"host", "host"};
        auto backend = createGpuBackend(o);
        body(r, comm, *backend);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!error) error = std::current_exception();
        for (auto& t : transports) t->abort("a rank failed");
      }
    });
  }
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);
}

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
  runTwoRanks("gpustaged1", p, [](int rank, collectives::Communicator& comm, GpuBackend& backend) {
    const std::vector<size_t> counts = {3, 1 << 20, 1000, 5};  // 4 MiB tensor: several chunks
    std::vector<float*> bufs;
    GpuBatch fused;
    for (size_t i = 0; i < counts.size(); ++i) {
      float* b = nullptr;
      ASSERT_EQ(cudaMalloc(&b, counts[i] * 4), cudaSuccess);
      auto h = pattern(rank, counts[i]);
      cudaMemcpy(b, h.data(), counts[i] * 4, cudaMemcpyHostToDevice);
      bufs.push_back(b);
      fused.tensors.push_back({"t" + std::to_string(i), b, b, counts[i], backend.recordReady(0, nullptr)});
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
      for (size_t k = 0; k < counts[i]; ++k) ASSERT_EQ(got[k], (a[k] + b[k]) * scale) << i << ":" << k;
      cudaFree(bufs[i]);
    }
  });
}

TEST_F(GpuHostStaged, OtherCollectives) {
  runTwoRanks("gpustaged2", stagedParams(), [](int rank, collectives::Communicator& comm, GpuBackend& backend) {
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

    backend.reducescatterv(comm, 0, DataType::kFloat32, t, out.get(), {300, 700}, ReduceOp::kSum, 1.0, 2.0)->wait();
    const size_t off = rank == 0 ? 0 : 300, cnt = rank == 0 ? 300 : 700;
    got.assign(cnt, 0);
    cudaMemcpy(got.data(), out.get(), cnt * 4, cudaMemcpyDeviceToHost);
    for (size_t k = 0; k < cnt; ++k) ASSERT_EQ(got[k], (a[off + k] + b[off + k]) * 2.0f);
  });
}

double medianOf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median microseconds of body() over reps runs after 3 warm-ups.
double timeUs(int reps, const std::function<void()>& body) {
  std::vector<double> us;
  for (int i = 0; i < reps + 3; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    body();
    auto t1 = std::chrono::steady_clock::now();
    if (i >= 3) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  return medianOf(us);
}

// (c) of the device check: 2 ranks on one GPU through the host-staged path.
TEST_F(GpuHostStaged, ReportLatencyAndBandwidth) {
  Params p;  // the shipped defaults (ring, slot, spin), with a bounded timeout
  p.timeout_s = 60;
  runTwoRanks("gpustaged3", p, [](int rank, collectives::Communicator& comm, GpuBackend& backend) {
    for (size_t bytes : {size_t{4}, size_t{1} << 20, size_t{64} << 20}) {
      const size_t n = bytes / 4;
      auto buf = backend.allocate(0, bytes);
      auto h = pattern(rank, n);
      cudaMemcpy(buf.get(), h.data(), bytes, cudaMemcpyHostToDevice);
      GpuBatch batch;
      batch.tensors.push_back({"b", buf.get(), buf.get(), n, nullptr});
      const int reps = bytes > (1 << 20) ? 10 : 200;
      const double med = timeUs(reps, [&] {
        batch.tensors[0].ready = backend.recordReady(0, nullptr);
        backend.allreduce(comm, batch, ReduceOp::kSum, 1.0, 0.5)->wait();
      });
      std::vector<float> got(n);
      cudaMemcpy(got.data(), buf.get(), bytes, cudaMemcpyDeviceToHost);
      auto a = pattern(0, n), b = pattern(1, n);
      for (size_t k = 0; k < n; ++k) ASSERT_EQ(got[k], (a[k] + b[k]) * 0.5f) << k;  // idempotent
      // The CPU collective alone on the same bytes in pinned memory: what staging adds on top.
      void* host = nullptr;
      cudaHostAlloc(&host, bytes, cudaHostAllocDefault);
      std::memcpy(host, h.data(), bytes);
      const double cpu_med = timeUs(reps, [&] {
        collectives::allreduce(comm, host, host, n, DataType::kFloat32, ReduceOp::kSum);
      });
      cudaFreeHost(host);
      if (rank == 0) {
        std::printf("GPUSTAGED allreduce 2 ranks 1 GPU bytes=%zu median_us=%.1f algbw_GBps=%.2f "
                    "cpu_allreduce_only_us=%.1f cpu_algbw_GBps=%.2f\n",
                    bytes, med, bytes / med / 1e3, cpu_med, bytes / cpu_med / 1e3);
      }
    }
  });
}

// The staged pipeline's split at 64 MiB (both ranks at once, as in a real step): the copies
// alone (pinned, both ranks copying together), the CPU allreduce alone, and the pipelined
// allreduce at several chunk sizes with where the engine thread waited (StagedSplit); with
// PERSEUS_REDUCE_THREADS 1 and auto (0), so the multi-threaded CPU reduction shows.
void reportPipelineSplit(int64_t reduce_threads) {
  Params p;
  p.timeout_s = 60;
  p.reduce_threads = reduce_threads;
  runTwoRanks("gpustaged4t" + std::to_string(reduce_threads), p, [&p](int rank, collectives::Communicator& comm, GpuBackend&) {
    const size_t bytes = size_t{64} << 20, n = bytes / 4;
    const int reps = 8;
    nccl::DeviceContext dc(0, p);
    nccl::Slot& slot = dc.nextSlot();
    void* dev = nullptr;
    ASSERT_EQ(cudaMalloc(&dev, bytes), cudaSuccess);
    auto h = pattern(rank, n);
    void* host = dc.pinned(0, bytes);
    std::memcpy(host, h.data(), bytes);
    ASSERT_EQ(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice), cudaSuccess);
    auto copyUs = [&](cudaMemcpyKind kind) {
      return timeUs(reps, [&] {
        collectives::barrier(comm);  // both ranks copy at the same time
        if (kind == cudaMemcpyDeviceToHost) cudaMemcpyAsync(host, dev, bytes, kind, slot.stream);
        else cudaMemcpyAsync(dev, host, bytes, kind, slot.stream);
        cudaStreamSynchronize(slot.stream);
      });
    };
    const double d2h = copyUs(cudaMemcpyDeviceToHost), h2d = copyUs(cudaMemcpyHostToDevice);
    const double cpu = timeUs(reps, [&] {
      collectives::allreduce(comm, host, host, n, DataType::kFloat32, ReduceOp::kSum);
    });
    if (rank == 0) {
      std::printf("GPUSTAGED split reduce_threads=%d bytes=%zu d2h_alone_us=%.1f (%.2f GB/s per rank) "
                  "h2d_alone_us=%.1f (%.2f GB/s) cpu_allreduce_alone_us=%.1f (%.2f GB/s)\n",
                  static_cast<int>(p.reduce_threads), bytes, d2h, bytes / d2h / 1e3, h2d, bytes / h2d / 1e3, cpu, bytes / cpu / 1e3);
    }
    for (size_t chunk_mib : {1, 2, 4, 8, 16}) {
      nccl::StagedSplit split;
      const double total = timeUs(reps, [&] {
        // In place: the values double each call, far from overflow within these few calls.
        nccl::HostStaged(dc, p.timeout_s, chunk_mib << 20, &split)
            .allreduce(comm, slot, dev, dev, n, DataType::kFloat32, ReduceOp::kSum, 1.0, 1.0);
      });
      const double c = split.calls;
      if (rank == 0) {
        std::printf("GPUSTAGED pipeline reduce_threads=%d bytes=%zu chunk_MiB=%zu total_us=%.1f algbw_GBps=%.2f "
                    "d2h_wait_us=%.1f reduce_us=%.1f h2d_wait_us=%.1f (means over %d calls)\n",
                    static_cast<int>(p.reduce_threads), bytes, chunk_mib, total,
                    bytes / total / 1e3, split.d2h_wait_us / c,
                    split.reduce_us / c, split.h2d_wait_us / c, split.calls);
      }
    }
    cudaFree(dev);
  });
}

TEST_F(GpuHostStaged, ReportPipelineSplit) {
  reportPipelineSplit(1);
  reportPipelineSplit(0);
}

}  // namespace
}  // namespace perseus::backends

#else
TEST(GpuHostStaged, SkippedWithoutCuda) { GTEST_SKIP() << "build without CUDA"; }
#endif
