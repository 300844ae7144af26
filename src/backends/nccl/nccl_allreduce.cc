#include <algorithm>

#include "backends/nccl/cuda_util.h"
#include "backends/nccl/host_staged.h"
#include "backends/nccl/nccl_backend_impl.h"
#include "backends/nccl/nccl_types.h"
#include "common/logging.h"
#include "kernels/cuda/fusion_kernels.h"

namespace perseus::nccl {
namespace {

using kernels::cuda::batchedCopy;
using kernels::cuda::CopyEntry;

// Auto hierarchical allreduce only for large buffers: below this, NCCL's own tree/ring across
// hosts is as fast and the two extra local steps cost latency.
constexpr size_t kHierarchicalMinBytes = size_t{16} << 20;
// Host-staged single tensors up to this size are scaled on the host (H200: 4 B took 25 us with
// host scaling, 37 us with a postscale kernel; 64 MiB spent ~3 ms more scaling on the host).
constexpr size_t kHostScaleMaxBytes = size_t{64} << 10;

}  // namespace

std::shared_ptr<GpuWork> NcclBackend::allreduce(collectives::Communicator& comm,
                                                const GpuBatch& batch, ReduceOp op, double prescale,
                                                double postscale) {
  GpuScaling scaling = gpuScaling(batch.dtype, op, prescale, postscale, comm.size());
  if (scaling.op == ReduceOp::kAdasum) {
    if (comm.size() > 1) return adasumStaged(comm, batch, scaling.prescale, scaling.postscale);
    scaling.op = ReduceOp::kSum;  // the Adasum of one rank's tensor is that tensor
  }
  if (auto work = worldOneInPlace(comm, batch, scaling.prescale, scaling.postscale)) return work;
  std::vector<const GpuTensor*> inputs;
  size_t total = 0;
  for (const auto& t : batch.tensors) {
    inputs.push_back(&t);
    total += t.count;
  }
  Call call = begin(comm, batch.device, inputs);
  const AllreducePlan plan = prepareAllreduce(call, batch, total, scaling);
  const bool direct = batch.tensors.size() == 1 && plan.wire == batch.dtype && !plan.hierarchical;
  if (direct && total > 0) {
    singleTensorAllreduce(call, comm, batch.tensors[0], batch.dtype, plan);
  } else {
    fusedAllreduce(call, comm, batch, plan);
  }
  return finishAllreduce(call, batch, plan);
}

NcclBackend::AllreducePlan NcclBackend::prepareAllreduce(const Call& call, const GpuBatch& batch,
                                                         size_t total, GpuScaling scaling) {
  const DataType dtype = batch.dtype;
  AllreducePlan plan{scaling.op, scaling.prescale, scaling.postscale, dtype, false, false, nullptr};
  if (dtype == DataType::kFloat32 && options_.params.allreduce_dtype == 0)
    plan.wire = DataType::kFloat16;
  if (dtype == DataType::kFloat32 && options_.params.allreduce_dtype == 2) plan.mixed = true;
  if (options_.params.allreduce_nancheck && isFloatingPoint(dtype)) {
    plan.nan_flag = call.slot->nan_flag;
    checkCuda(cudaMemsetAsync(plan.nan_flag, 0x7F, sizeof(int), call.stream), "cudaMemsetAsync");
  }
  CommState& s = *call.state;
  plan.hierarchical = useHierarchical(s, total * dataTypeSize(dtype));
  if (plan.hierarchical) s.ensureHierarchical();
  return plan;
}

void NcclBackend::singleTensorAllreduce(const Call& call, collectives::Communicator& comm,
                                        const GpuTensor& t, DataType dtype,
                                        const AllreducePlan& plan) {
  // NCCL reads the input and writes the output itself.
  CommState& s = *call.state;
  const ReduceOp op = plan.op;
  const bool nan = plan.nan_flag != nullptr;
  if (s.staged && !nan && t.count * dataTypeSize(dtype) <= kHostScaleMaxBytes) {
    // Small and staged: scaling on the host is cheaper than a kernel launch and its wait.
    HostStaged(*call.dc, options_.params.timeout_s, stagedChunk())
        .allreduce(comm, *call.slot, t.input, t.output, t.count, dtype, op, plan.prescale,
                   plan.postscale);
    return;
  }
  // Scales run on the GPU (an extra pass there costs microseconds; on the host, milliseconds).
  const void* src = t.input;
  if (plan.prescale != 1.0 || nan) {
    CopyEntry e{t.input, t.output, t.count, 0};
    batchedCopy(&e, 1, dtype, dtype, plan.prescale, plan.nan_flag, call.stream);
    src = t.output;
  }
  if (s.staged) {
    HostStaged(*call.dc, options_.params.timeout_s, stagedChunk())
        .allreduce(comm, *call.slot, src, t.output, t.count, dtype, op, 1.0, 1.0);
  } else {
    s.flat->run("ncclAllReduce", [&] {
      return api().allReduce(src, t.output, t.count, ncclType(dtype), ncclOp(op, dtype),
                             s.flat->get(), call.stream);
    });
  }
  if (plan.postscale != 1.0) {
    CopyEntry e{t.output, t.output, t.count, 0};
    batchedCopy(&e, 1, dtype, dtype, plan.postscale, nullptr, call.stream);
  }
}

void NcclBackend::fusedAllreduce(const Call& call, collectives::Communicator& comm,
                                 const GpuBatch& batch, const AllreducePlan& plan) {
  std::vector<size_t> counts;
  for (const auto& t : batch.tensors) counts.push_back(t.count);
  // Hierarchical rounds leave room for padding to a multiple of the local size.
  const size_t align = plan.hierarchical ? 64 * static_cast<size_t>(call.state->local_size) : 64;
  size_t capacity = call.dc->fusionBytes() / align * align;
  for (const auto& round :
       fusion::planRounds(counts, dataTypeSize(plan.wire), capacity, std::min(align, capacity))) {
    fusedRound(call, comm, batch, round, plan);
  }
}

std::shared_ptr<GpuWork> NcclBackend::finishAllreduce(const Call& call, const GpuBatch& batch,
                                                      const AllreducePlan& plan) {
  const int* nan_host = nullptr;
  std::vector<std::string> names;
  if (plan.nan_flag != nullptr) {
    Slot& slot = *call.slot;
    int* host = slot.nan_host + (slot.nan_next++ % DeviceContext::kNanRing);
    *host = kNoNonFinite;
    checkCuda(
        cudaMemcpyAsync(host, plan.nan_flag, sizeof(int), cudaMemcpyDeviceToHost, call.stream),
        "cudaMemcpyAsync (NaN flag)");
    nan_host = host;
    for (const auto& t : batch.tensors) names.emplace_back(t.name);
  }
  const CommState& s = *call.state;
  std::vector<std::shared_ptr<NcclComm>> comms;
  if (!s.staged)
    comms = plan.hierarchical ? std::vector<std::shared_ptr<NcclComm>>{s.local, s.cross}
                              : std::vector<std::shared_ptr<NcclComm>>{s.flat};
  return finish(call, describe("allreduce", batch.tensors), std::move(comms), nan_host,
                std::move(names));
}

bool NcclBackend::useHierarchical(const CommState& s, size_t bytes) {
  const std::string& mode = options_.params.hierarchical_allreduce;
  if (mode == "0" || s.staged) return false;
  if (!s.uniform) {
    if (mode == "1" && !warned_hierarchical_) {
      warned_hierarchical_ = true;
      PERSEUS_LOG(WARNING, kCuda) << "PERSEUS_HIERARCHICAL_ALLREDUCE=1 ignored for " << s.label
                                  << ": hosts hold different numbers of its ranks";
    }
    return false;
  }
  if (mode == "1") return true;
  return s.hosts > 1 && s.local_size > 1 && bytes >= kHierarchicalMinBytes;
}

// Note [Hierarchical allreduce]
// The buffer (padded to a multiple of the local size; the fusion buffer has room) is
// reduce-scattered within the host, each rank's 1/L part is allreduced across hosts with the
// ranks of the same local index, and the parts are allgathered within the host again. All
// three run on the slot stream in device memory; nothing is staged through the host. In mixed
// mode (PERSEUS_ALLREDUCE_DTYPE=2) only the cross-host part travels as float16.
void NcclBackend::hierarchicalAllreduce(const Call& call, void* buf, size_t count, DataType wire,
                                        ReduceOp op, bool mixed) {
  CommState& s = *call.state;
  const int l = s.local->size();
  const size_t es = dataTypeSize(wire);
  const size_t chunk = (count + static_cast<size_t>(l) - 1) / static_cast<size_t>(l);
  void* part = at(buf, static_cast<size_t>(s.local->rank()) * chunk * es);
  const ncclDataType_t type = ncclType(wire);
  const ncclRedOp_t red = ncclOp(op, wire);
  s.local->run("ncclReduceScatter (within host)", [&] {
    return api().reduceScatter(buf, part, chunk, type, red, s.local->get(), call.stream);
  });
  if (s.cross->size() > 1) {
    if (mixed && wire == DataType::kFloat32) {
      void* half = call.dc->aux(*call.slot);
      CopyEntry down{part, half, chunk, 0};
      batchedCopy(&down, 1, DataType::kFloat32, DataType::kFloat16, 1.0, nullptr, call.stream);
      s.cross->run("ncclAllReduce (across hosts, float16)", [&] {
        return api().allReduce(half, half, chunk, ncclFloat16, ncclOp(op, DataType::kFloat16),
                               s.cross->get(), call.stream);
      });
      CopyEntry up{half, part, chunk, 0};
      batchedCopy(&up, 1, DataType::kFloat16, DataType::kFloat32, 1.0, nullptr, call.stream);
    } else {
      s.cross->run("ncclAllReduce (across hosts)", [&] {
        return api().allReduce(part, part, chunk, type, red, s.cross->get(), call.stream);
      });
    }
  }
  s.local->run("ncclAllGather (within host)", [&] {
    return api().allGather(part, buf, chunk, type, s.local->get(), call.stream);
  });
}

void NcclBackend::fusedRound(const Call& call, collectives::Communicator& comm,
                             const GpuBatch& batch, const fusion::FusionRound& round,
                             const AllreducePlan& plan) {
  const DataType wire = plan.wire;
  const ReduceOp op = plan.op;
  const size_t es = dataTypeSize(batch.dtype), ws = dataTypeSize(wire);
  void* fusion = call.slot->fusion;
  std::vector<CopyEntry> in, out;
  in.reserve(round.pieces.size());
  out.reserve(round.pieces.size());
  for (const auto& p : round.pieces) {
    const GpuTensor& t = batch.tensors[p.tensor];
    in.push_back(CopyEntry{at(t.input, p.offset * es), at(fusion, p.buffer_offset * ws), p.count,
                           static_cast<int>(p.tensor)});
    out.push_back(CopyEntry{at(fusion, p.buffer_offset * ws), at(t.output, p.offset * es), p.count,
                            static_cast<int>(p.tensor)});
  }
  batchedCopy(in.data(), static_cast<int>(in.size()), batch.dtype, wire, plan.prescale,
              plan.nan_flag, call.stream);
  CommState& s = *call.state;
  if (s.staged) {
    HostStaged(*call.dc, options_.params.timeout_s, stagedChunk())
        .allreduce(comm, *call.slot, fusion, fusion, round.count, wire, op, 1.0, 1.0);
  } else if (plan.hierarchical) {
    hierarchicalAllreduce(call, fusion, round.count, wire, op, plan.mixed);
  } else {
    s.flat->run("ncclAllReduce", [&] {
      return api().allReduce(fusion, fusion, round.count, ncclType(wire), ncclOp(op, wire),
                             s.flat->get(), call.stream);
    });
  }
  batchedCopy(out.data(), static_cast<int>(out.size()), wire, batch.dtype, plan.postscale, nullptr,
              call.stream);
}

// Note [World size one]
// An allreduce over a set of one rank, in place, with nothing to scale, cast or check, leaves
// the tensor as it is: NCCL itself moves no bytes for it (its one-rank path copies only when
// the output differs from the input). So the work is complete when the input is ready: the
// tensor's ready event (recorded on the producer's stream at submission) is the work's
// completion event, and the slot stream, the NCCL call and a second event are skipped. Every
// other case (several tensors, out of place, scales, casts, the NaN check) runs as usual.
std::shared_ptr<GpuWork> NcclBackend::worldOneInPlace(collectives::Communicator& comm,
                                                      const GpuBatch& batch, double prescale,
                                                      double postscale) {
  if (comm.size() != 1 || batch.tensors.size() != 1) return nullptr;
  const GpuTensor& t = batch.tensors[0];
  const bool nan = options_.params.allreduce_nancheck && isFloatingPoint(batch.dtype);
  const bool cast = batch.dtype == DataType::kFloat32 && options_.params.allreduce_dtype == 0;
  if (t.input != t.output || !t.ready || prescale != 1.0 || postscale != 1.0 || nan || cast) {
    return nullptr;
  }
  auto ready = std::static_pointer_cast<CudaEvent>(t.ready);
  if (ready->device() != batch.device) return nullptr;  // begin() reports the mismatch
  auto work = std::make_shared<CudaWork>(context(batch.device).events(),
                                         describe("allreduce", batch.tensors),
                                         options_.params.timeout_s, std::move(ready));
  track(work);
  return work;
}

}  // namespace perseus::nccl
