// World size 1 on the NCCL backend: host wall time from the call to the completed wait, as
// torch.distributed's all_reduce + synchronize is timed (bench/gpu/allreduce_world1.py), at
// 4 B, 1 MiB and 256 MiB; once through the in-place no-op (Note [World size one]) and once
// through NCCL on the slot stream. Prints "GPUNCCL" lines. Exits 77 where there is no GPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <vector>

#include "backends/gpu_backend.h"
#include "common/status.h"
#include "support/gpu_presence.h"
#include "support/gpu_ranks.h"

namespace perseus::backends {
namespace {

void run() {
  testing::World1 w("gpuncclbench");
  auto backend = w.backend(w.params);
  for (size_t bytes : {size_t{4}, size_t{1} << 20, size_t{256} << 20}) {
    const size_t n = bytes / 4;
    auto buf = backend->allocate(0, bytes);
    PERSEUS_CHECK(cudaMemset(buf.get(), 0, bytes) == cudaSuccess);
    GpuBatch batch;
    batch.tensors.push_back({"b", buf.get(), buf.get(), n, nullptr});
    const int reps = bytes > (1 << 20) ? 20 : 200;
    // In place with scale 1: Note [World size one] (no NCCL call). Then through NCCL on the
    // slot stream: without a ready event the no-op does not apply (the event is still
    // recorded, so both loops pay for it).
    auto timeIt = [&](bool noop) {
      std::vector<double> us;
      for (int i = 0; i < reps + 5; ++i) {
        auto t0 = std::chrono::steady_clock::now();
        auto ready = backend->recordReady(0, nullptr);
        batch.tensors[0].ready = noop ? ready : nullptr;
        backend->allreduce(*w.comm, batch, ReduceOp::kSum, 1.0, 1.0)->wait();
        auto t1 = std::chrono::steady_clock::now();
        if (i >= 5) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      }
      std::sort(us.begin(), us.end());
      return us[us.size() / 2];
    };
    const double noop = timeIt(true);
    const double nccl = timeIt(false);
    std::printf("GPUNCCL allreduce world1 bytes=%zu median_us=%.1f nccl_path_us=%.1f\n", bytes,
                noop, nccl);
  }
}

}  // namespace
}  // namespace perseus::backends

int main() {
  if (!perseus::testing::haveGpu()) {
    std::fprintf(stderr, "gpu_world1_latency_bench: no CUDA device\n");
    return 77;
  }
  try {
    perseus::backends::run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_world1_latency_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
