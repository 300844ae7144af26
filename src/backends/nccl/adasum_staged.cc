#include <algorithm>

#include "backends/nccl/host_staged.h"
#include "backends/nccl/nccl_backend_impl.h"

namespace perseus::nccl {

// NCCL has no Adasum: the tensors go through host memory, as Horovod's builds without NCCL
// Adasum copy GPU tensors to the CPU, and the host algorithm combines each one whole (one
// chunk: the coefficients need the whole tensor's dot products).
std::shared_ptr<GpuWork> NcclBackend::adasumStaged(collectives::Communicator& comm,
                                                   const GpuBatch& batch, double prescale,
                                                   double postscale) {
  std::vector<const GpuTensor*> inputs;
  for (const auto& t : batch.tensors) inputs.push_back(&t);
  Call call = begin(comm, batch.device, inputs);
  const size_t es = dataTypeSize(batch.dtype);
  for (const auto& t : batch.tensors) {
    HostStaged(*call.dc, options_.params.timeout_s, std::max<size_t>(es, t.count * es))
        .allreduce(comm, *call.slot, t.input, t.output, t.count, batch.dtype, ReduceOp::kAdasum,
                   prescale, postscale);
  }
  return finish(call, describe("allreduce", batch.tensors), {});
}

}  // namespace perseus::nccl
