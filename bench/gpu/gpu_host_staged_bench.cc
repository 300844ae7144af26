// Two ranks on one GPU (threads of one process) through the host-staged data plane, which the
// backend picks because NCCL refuses two ranks on one device. Prints "GPUSTAGED" lines:
//   latency   the staged allreduce at 4 B, 1 MiB and 64 MiB, and the CPU allreduce alone;
//   split     at 64 MiB, the copies alone, the CPU allreduce alone and the pipelined allreduce
//             per chunk size with where it waited, at PERSEUS_REDUCE_THREADS 1 and auto.
// Usage: gpu_host_staged_bench [latency|split]   (no argument: both). Exits 77 without a GPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "backends/gpu_backend.h"
#include "backends/nccl/device_context.h"
#include "backends/nccl/host_staged.h"
#include "collectives/collectives.h"
#include "collectives/communicator.h"
#include "common/status.h"
#include "support/gpu_presence.h"
#include "support/gpu_ranks.h"

namespace perseus::backends {
namespace {

std::vector<float> pattern(int rank, size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>((i * 7 + rank * 13) % 101) - 50.0f;
  return v;
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

// 2 ranks on one GPU through the host-staged path: latency and bandwidth at 4 B, 1 MiB, 64 MiB,
// against the CPU collective alone on the same bytes.
void reportLatencyAndBandwidth() {
  Params p;  // the shipped defaults (ring, slot, spin), with a bounded timeout
  p.timeout_s = 60;
  testing::runTwoRanksOnOneGpu(
      "gpustaged3", p, [](int rank, collectives::Communicator& comm, GpuBackend& backend) {
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
          for (size_t k = 0; k < n; ++k) {  // idempotent: the average of the same inputs each time
            PERSEUS_CHECK(got[k] == (a[k] + b[k]) * 0.5f, << "element " << k << " is " << got[k]);
          }
          // The CPU collective alone on the same bytes in pinned memory: what staging adds on top.
          void* host = nullptr;
          cudaHostAlloc(&host, bytes, cudaHostAllocDefault);
          std::memcpy(host, h.data(), bytes);
          const double cpu_med = timeUs(reps, [&] {
            collectives::allreduce(comm, host, host, n, DataType::kFloat32, ReduceOp::kSum);
          });
          cudaFreeHost(host);
          if (rank == 0) {
            std::printf(
                "GPUSTAGED allreduce 2 ranks 1 GPU bytes=%zu median_us=%.1f algbw_GBps=%.2f "
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
  testing::runTwoRanksOnOneGpu(
      "gpustaged4t" + std::to_string(reduce_threads), p,
      [&p](int rank, collectives::Communicator& comm, GpuBackend&) {
        const size_t bytes = size_t{64} << 20, n = bytes / 4;
        const int reps = 8;
        nccl::DeviceContext dc(0, p);
        nccl::Slot& slot = dc.nextSlot();
        void* dev = nullptr;
        PERSEUS_CHECK(cudaMalloc(&dev, bytes) == cudaSuccess);
        auto h = pattern(rank, n);
        void* host = dc.pinned(0, bytes);
        std::memcpy(host, h.data(), bytes);
        PERSEUS_CHECK(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice) == cudaSuccess);
        auto copyUs = [&](cudaMemcpyKind kind) {
          return timeUs(reps, [&] {
            collectives::barrier(comm);  // both ranks copy at the same time
            if (kind == cudaMemcpyDeviceToHost)
              cudaMemcpyAsync(host, dev, bytes, kind, slot.stream);
            else
              cudaMemcpyAsync(dev, host, bytes, kind, slot.stream);
            cudaStreamSynchronize(slot.stream);
          });
        };
        const double d2h = copyUs(cudaMemcpyDeviceToHost), h2d = copyUs(cudaMemcpyHostToDevice);
        const double cpu = timeUs(reps, [&] {
          collectives::allreduce(comm, host, host, n, DataType::kFloat32, ReduceOp::kSum);
        });
        if (rank == 0) {
          std::printf(
              "GPUSTAGED split reduce_threads=%d bytes=%zu d2h_alone_us=%.1f (%.2f GB/s per rank) "
              "h2d_alone_us=%.1f (%.2f GB/s) cpu_allreduce_alone_us=%.1f (%.2f GB/s)\n",
              static_cast<int>(p.reduce_threads), bytes, d2h, bytes / d2h / 1e3, h2d,
              bytes / h2d / 1e3, cpu, bytes / cpu / 1e3);
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
            std::printf(
                "GPUSTAGED pipeline reduce_threads=%d bytes=%zu chunk_MiB=%zu total_us=%.1f "
                "algbw_GBps=%.2f "
                "d2h_wait_us=%.1f reduce_us=%.1f h2d_wait_us=%.1f (means over %d calls)\n",
                static_cast<int>(p.reduce_threads), bytes, chunk_mib, total, bytes / total / 1e3,
                split.d2h_wait_us / c, split.reduce_us / c, split.h2d_wait_us / c, split.calls);
          }
        }
        cudaFree(dev);
      });
}

}  // namespace
}  // namespace perseus::backends

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "all";
  if (what != "all" && what != "latency" && what != "split") {
    std::fprintf(stderr, "usage: gpu_host_staged_bench [latency|split]\n");
    return 2;
  }
  if (!perseus::testing::haveGpu()) {
    std::fprintf(stderr, "gpu_host_staged_bench: no CUDA device\n");
    return 77;
  }
  try {
    if (what != "split") perseus::backends::reportLatencyAndBandwidth();
    if (what != "latency") {
      perseus::backends::reportPipelineSplit(1);
      perseus::backends::reportPipelineSplit(0);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_host_staged_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
