// The seam between the engine (what to run, in which order) and a device's data plane (how).
// The engine picks one Executor per device kind; the CPU one runs the host collectives of
// collectives.h through a fusion buffer; the GPU one enqueues the group on the GpuBackend and
// appends the GpuWork to each entry's gpu_works (the engine completes the handles when the
// work is done: Note [GPU completion] in gpu_executor.cc).
//
// Thread contract: the Cycle, under the cycle lock (cycle.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backends/gpu_backend.h"
#include "collectives/communicator.h"
#include "engine/entry.h"
#include "engine/exec/reduction.h"
#include "fusion/tensor_groups.h"

namespace perseus::engine {

using fusion::FusionGroup;
using fusion::FusionItem;

class Timeline;

// One alltoall's layout on this rank: the splits exchanged with every rank (collective over
// `comm`), the bytes to send to and receive from each, and the output's shape.
struct AlltoallPlan {
  std::vector<size_t> send_bytes, recv_bytes;
  std::vector<int64_t> recv_rows;  // rows from each rank: the handle's received splits
  std::vector<int64_t> out_shape;
};
AlltoallPlan planAlltoall(collectives::Communicator& comm, const Entry& e, size_t tensor);

class Executor {
 public:
  virtual ~Executor() = default;
  // Runs one group of allreduce/allgather/broadcast/alltoall/reducescatter tensors.
  // entries[i] is this rank's entry for responses[i], or null when this rank takes part
  // without one (a joined rank contributes zeros). Outputs that the library owns are
  // allocated in the entry's handle. Throws what the collectives throw.
  virtual void run(const FusionGroup& group, const std::vector<Response>& responses,
                   const std::vector<Entry*>& entries, collectives::Communicator& comm,
                   FusionBuffer& buffer, Timeline* timeline) = 0;
};

std::unique_ptr<Executor> makeCpuExecutor();
// `backend` outlives the executor. `joined_device` gives the CUDA ordinal of a joined rank's
// zeros (called on the engine thread, only when this rank takes part without an entry).
std::unique_ptr<Executor> makeGpuExecutor(backends::GpuBackend* backend,
                                          std::function<int()> joined_device);

}  // namespace perseus::engine
