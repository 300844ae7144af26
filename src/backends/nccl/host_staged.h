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

class HostStaged {
 public:
  HostStaged(DeviceContext& device, double timeout_s) : device_(device), timeout_s_(timeout_s) {}

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
};

}  // namespace perseus::nccl
