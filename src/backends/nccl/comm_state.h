// What the GPU data plane knows about one process set on one device: which data plane it uses
// (NCCL, or host-staged when NCCL cannot run there), its NCCL communicators (the flat one, and
// for hierarchical allreduce the local and cross ones, split from it on first use), and where
// its members sit (hosts).
//
// Creation is collective over the set: every member creates it at the same negotiated
// operation (the first CUDA collective of the set on its device). Engine thread only.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backends/gpu_backend.h"
#include "backends/nccl/nccl_comm.h"

namespace perseus::nccl {

struct CommState {
  std::string label;    // "process set [0,1,2,3]" for messages
  bool staged = false;  // host-staged data plane
  std::string staged_reason;
  int hosts = 1;        // distinct hosts among the members
  int host_index = 0;   // this rank's host, in order of first appearance in the set
  int local_index = 0;  // this rank's index among the members on its host
  int local_size = 1;   // members on this rank's host
  bool uniform = true;  // every host has local_size members
  std::shared_ptr<NcclComm> flat, local, cross;

  // Collective over `comm`. Exchanges (host, GPU bus id, NCCL usable) among the members, picks
  // the data plane and creates the flat NCCL communicator.
  static std::unique_ptr<CommState> create(collectives::Communicator& comm, int device,
                                           const backends::GpuBackendOptions& options);
  // Collective over the set: splits flat into local and cross (once).
  void ensureHierarchical();
  // Aborts every communicator (idempotent).
  void abort();
};

}  // namespace perseus::nccl
