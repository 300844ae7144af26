// Ranks for the GPU tests and benchmarks, over the real shared-memory transport: a world of one
// rank, and two ranks on one GPU as threads of one process (NCCL refuses two ranks on one
// device, so their backends pick the host-staged data plane).
#pragma once

#if PERSEUS_HAVE_CUDA
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backends/gpu_backend.h"
#include "collectives/communicator.h"
#include "common/params.h"
#include "transport/channel_transport.h"
#include "transport/shm/shm_local_group.h"

namespace perseus::testing {

// A world of one rank: a real (one-member) transport and communicator.
struct World1 {
  Params params;
  std::vector<std::unique_ptr<transport::shm::ShmLocalGroup>> groups;
  std::unique_ptr<transport::ChannelTransport> transport;
  std::unique_ptr<collectives::Communicator> comm;
  explicit World1(const std::string& name);
  std::unique_ptr<backends::GpuBackend> backend(const Params& p);
};

// Runs body(rank, comm, backend) on two threads, both on GPU 0. A rank that throws aborts
// every transport, so the other fails instead of waiting; the first error is rethrown.
void runTwoRanksOnOneGpu(
    const std::string& name, Params params,
    const std::function<void(int, collectives::Communicator&, backends::GpuBackend&)>& body);

}  // namespace perseus::testing
#endif
