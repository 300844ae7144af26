#include <algorithm>
#include <numeric>

#include "backends/nccl/cuda_util.h"
#include "backends/nccl/host_staged.h"
#include "backends/nccl/nccl_backend_impl.h"
#include "backends/nccl/nccl_types.h"
#include "kernels/cuda/fusion_kernels.h"

namespace perseus::nccl {

using kernels::cuda::batchedCopy;
using kernels::cuda::CopyEntry;

std::shared_ptr<GpuWork> NcclBackend::allgatherv(collectives::Communicator& comm, int device,
                                                 const GpuTensor& in, void* out,
                                                 const std::vector<size_t>& bytes) {
  Call call = begin(comm, device, {&in});
  CommState& s = *call.state;
  if (s.staged) {
    HostStaged(*call.dc, options_.params.timeout_s, stagedChunk())
        .allgatherv(comm, *call.slot, in.input, out, bytes);
    return finish(call, describe("allgather", {in}), {});
  }
  const bool equal =
      std::all_of(bytes.begin(), bytes.end(), [&](size_t b) { return b == bytes[0]; });
  NcclComm& c = *s.flat;
  if (equal) {
    c.run("ncclAllGather", [&] {
      return api().allGather(in.input, out, bytes[0], ncclUint8, c.get(), call.stream);
    });
  } else {
    // Uneven parts: one broadcast per rank into its place, fused by the group.
    c.run("ncclGroupStart", [&] { return api().groupStart(); });
    size_t off = 0;
    for (int r = 0; r < comm.size(); ++r) {
      const void* send = r == comm.rank() ? in.input : at(out, off);
      c.run("ncclBroadcast", [&] {
        return api().broadcast(send, at(out, off), bytes[static_cast<size_t>(r)], ncclUint8, r,
                               c.get(), call.stream);
      });
      off += bytes[static_cast<size_t>(r)];
    }
    c.run("ncclGroupEnd (allgatherv)", [&] { return api().groupEnd(); });
  }
  return finish(call, describe("allgather", {in}), {s.flat});
}

std::shared_ptr<GpuWork> NcclBackend::broadcast(collectives::Communicator& comm, int device,
                                                const GpuTensor& t, size_t bytes, int root) {
  Call call = begin(comm, device, {&t});
  CommState& s = *call.state;
  if (s.staged) {
    HostStaged(*call.dc, options_.params.timeout_s, stagedChunk())
        .broadcast(comm, *call.slot, t.input, t.output, bytes, root);
    return finish(call, describe("broadcast", {t}), {});
  }
  s.flat->run("ncclBroadcast", [&] {
    return api().broadcast(t.input, t.output, bytes, ncclUint8, root, s.flat->get(), call.stream);
  });
  return finish(call, describe("broadcast", {t}), {s.flat});
}

std::shared_ptr<GpuWork> NcclBackend::alltoallv(collectives::Communicator& comm, int device,
                                                const GpuTensor& in,
                                                const std::vector<size_t>& send_bytes, void* out,
                                                const std::vector<size_t>& recv_bytes) {
  Call call = begin(comm, device, {&in});
  CommState& s = *call.state;
  if (s.staged) {
    HostStaged(*call.dc, options_.params.timeout_s, stagedChunk())
        .alltoallv(comm, *call.slot, in.input, send_bytes, out, recv_bytes);
    return finish(call, describe("alltoall", {in}), {});
  }
  NcclComm& c = *s.flat;
  c.run("ncclGroupStart", [&] { return api().groupStart(); });
  size_t soff = 0, roff = 0;
  for (int p = 0; p < comm.size(); ++p) {
    const size_t sb = send_bytes[static_cast<size_t>(p)], rb = recv_bytes[static_cast<size_t>(p)];
    if (sb > 0)
      c.run("ncclSend",
            [&] { return api().send(at(in.input, soff), sb, ncclUint8, p, c.get(), call.stream); });
    if (rb > 0)
      c.run("ncclRecv",
            [&] { return api().recv(at(out, roff), rb, ncclUint8, p, c.get(), call.stream); });
    soff += sb;
    roff += rb;
  }
  c.run("ncclGroupEnd (alltoallv)", [&] { return api().groupEnd(); });
  return finish(call, describe("alltoall", {in}), {s.flat});
}

std::shared_ptr<GpuWork> NcclBackend::reducescatterv(collectives::Communicator& comm, int device,
                                                     DataType dtype, const GpuTensor& in, void* out,
                                                     const std::vector<size_t>& counts, ReduceOp op,
                                                     double prescale, double postscale) {
  const GpuScaling scaling = gpuScaling(dtype, op, prescale, postscale, comm.size());
  op = scaling.op;
  prescale = scaling.prescale;
  postscale = scaling.postscale;
  Call call = begin(comm, device, {&in});
  CommState& s = *call.state;
  const size_t mine = counts[static_cast<size_t>(comm.rank())];
  if (s.staged) {
    HostStaged(*call.dc, options_.params.timeout_s, stagedChunk())
        .reducescatterv(comm, *call.slot, in.input, out, counts, dtype, op, prescale, postscale);
    return finish(call, describe("reducescatter", {in}), {});
  }
  const size_t es = dataTypeSize(dtype);
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  const void* src = in.input;
  void* scaled = nullptr;
  if (prescale != 1.0 && total > 0) {
    checkCuda(cudaMallocAsync(&scaled, total * es, call.stream), "cudaMallocAsync");
    CopyEntry e{in.input, scaled, total, 0};
    batchedCopy(&e, 1, dtype, dtype, prescale, nullptr, call.stream);
    src = scaled;
  }
  NcclComm& c = *s.flat;
  const bool equal =
      std::all_of(counts.begin(), counts.end(), [&](size_t n) { return n == counts[0]; });
  if (equal) {
    c.run("ncclReduceScatter", [&] {
      return api().reduceScatter(src, out, counts[0], ncclType(dtype), ncclOp(op, dtype), c.get(),
                                 call.stream);
    });
  } else {
    // Uneven blocks: one reduce per rank to that rank, fused by the group.
    c.run("ncclGroupStart", [&] { return api().groupStart(); });
    size_t off = 0;
    for (int r = 0; r < comm.size(); ++r) {
      c.run("ncclReduce", [&] {
        return api().reduce(at(src, off * es), out, counts[static_cast<size_t>(r)], ncclType(dtype),
                            ncclOp(op, dtype), r, c.get(), call.stream);
      });
      off += counts[static_cast<size_t>(r)];
    }
    c.run("ncclGroupEnd (reducescatterv)", [&] { return api().groupEnd(); });
  }
  if (scaled != nullptr) checkCuda(cudaFreeAsync(scaled, call.stream), "cudaFreeAsync");
  if (postscale != 1.0 && mine > 0) {
    CopyEntry e{out, out, mine, 0};
    batchedCopy(&e, 1, dtype, dtype, postscale, nullptr, call.stream);
  }
  return finish(call, describe("reducescatter", {in}), {s.flat});
}

}  // namespace perseus::nccl
