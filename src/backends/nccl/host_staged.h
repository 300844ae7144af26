// The host-staged data plane: device -> pinned host memory -> the CPU collectives
// (collectives/collectives.h) -> device. Used where NCCL cannot run: no libnccl, or two ranks
// of a set on one GPU (NCCL refuses duplicate devices).
//
// Note [Host-staged pipeline]
// An allreduce moves its buffer in chunks: every device-to-host copy is enqueued at once on the
// slot stream, each followed by an event; the engine thread waits for chunk k's event, reduces
// chunk k on the host, and enqueues its host-to-device copy on the slot's second stream. So the
// copies of later and earlier chunks overlap the CPU reduction of the current one.
//
// Every function here is synchronous for the host: it returns when the pinned memory is free
// again (the host-to-device copies have landed), after making slot.stream wait for them; the
// caller records the completion event on slot.stream after any copy-out it enqueues. Waits are
// bounded by PERSEUS_TIMEOUT (TimeoutError).
#pragma once

#include <vector>

#include "backends/nccl/device_context.h"
#include "collectives/communicator.h"
#include "common/dtype.h"

namespace perseus::nccl {

// Where the engine thread's time went in staged allreduces (summed over calls): waiting for
// device-to-host chunks, in the CPU collective (with the host scaling), and waiting for the
// last host-to-device copy. What the pipeline hides does not show: d2h + reduce + h2d is the
// wall time of the calls (up to the enqueue calls themselves).
struct StagedSplit {
  double d2h_wait_us = 0;
  double reduce_us = 0;
  double h2d_wait_us = 0;
  int calls = 0;
};

// Chunk of the pipeline (the engine passes PERSEUS_STAGED_CHUNK_BYTES): small enough that the
// first download and the last upload (which nothing overlaps) stay short, large enough that
// the per-chunk collective's fixed cost is small next to its bytes. 8 MiB was the fastest of
// 1-16 MiB on an H200 host (2 ranks as threads, docs/perf/gpu.md).
constexpr size_t kDefaultStagedChunkBytes = size_t{8} << 20;

class HostStaged {
 public:
  HostStaged(DeviceContext& device, double timeout_s, size_t chunk_bytes = kDefaultStagedChunkBytes,
             StagedSplit* split = nullptr)
      : device_(device), timeout_s_(timeout_s), chunk_bytes_(chunk_bytes), split_(split) {}

  // dst[i] = op over ranks of src[i] * prescale, times postscale (scales applied on the host).
  // src and dst are device pointers (may be equal); count elements of dtype.
  void allreduce(collectives::Communicator& comm, Slot& slot, const void* src, void* dst,
                 size_t count, DataType dtype, ReduceOp op, double prescale, double postscale);
  void allgatherv(collectives::Communicator& comm, Slot& slot, const void* in, void* out,
                  const std::vector<size_t>& bytes);
  void broadcast(collectives::Communicator& comm, Slot& slot, const void* in, void* out,
                 size_t bytes, int root);
  void alltoallv(collectives::Communicator& comm, Slot& slot, const void* in,
                 const std::vector<size_t>& send_bytes, void* out,
                 const std::vector<size_t>& recv_bytes);
  void reducescatterv(collectives::Communicator& comm, Slot& slot, const void* in, void* out,
                      const std::vector<size_t>& counts, DataType dtype, ReduceOp op,
                      double prescale, double postscale);

 private:
  // Blocks until `event` completed, within the timeout.
  void waitEvent(cudaEvent_t event, const char* what);
  // Device `in` (bytes) -> pinned buffer 0, waited for.
  void* download(Slot& slot, const void* in, size_t bytes);
  // Pinned `host` -> device `out`, waited for; slot.stream ordered after it.
  void upload(Slot& slot, const void* host, void* out, size_t bytes);

  DeviceContext& device_;
  double timeout_s_;
  size_t chunk_bytes_;
  StagedSplit* split_;  // not owned; null: no accounting
};

}  // namespace perseus::nccl
