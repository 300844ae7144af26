// The CUDA implementation of backends::GpuBackend: fusion kernels on Perseus's own streams,
// NCCL communicators per process set (created lazily, cached), hierarchical allreduce across
// hosts, and the host-staged fallback. See backends/gpu_backend.h for the contract.
#pragma once

#include <memory>

#include "backends/gpu_backend.h"

namespace perseus::nccl {

std::unique_ptr<backends::GpuBackend> createNcclBackend(const backends::GpuBackendOptions& options);

}  // namespace perseus::nccl
