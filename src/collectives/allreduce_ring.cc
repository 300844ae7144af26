// Ring allreduce over the transport: reduce-scatter, then allgather (p-1 steps each), so each
// rank sends and receives 2(p-1)/p of the vector: bandwidth-optimal. Each reduce-scatter step
// is pipelined in Params::tcp_chunk_bytes segments: a segment is reduced while the transport
// (kernel socket buffers, shm rings) already carries the next ones.
#include <algorithm>
#include <cstring>

#include "collectives/cost_model.h"
#include "collectives/detail.h"
#include "collectives/registry.h"
#include "kernels/reduce.h"

namespace perseus::collectives {
namespace {

double estimate(const Communicator& comm, const CollectiveArgs& args) {
  auto c = cost::pointToPoint(comm);
  double p = comm.size(), n = static_cast<double>(args.totalBytes());
  double chunk = static_cast<double>(std::max<int64_t>(1, comm.params().tcp_chunk_bytes));
  double messages = 2 * (p - 1) * std::max(1.0, std::ceil(n / p / chunk));
  return messages * c.alpha_us + 2 * (p - 1) / p * n * c.beta_us_per_byte +
         (p - 1) / p * n * c.gamma_us_per_byte;
}

void run(Communicator& comm, const CollectiveArgs& args) {
  const int p = comm.size(), r = comm.rank();
  const size_t esize = args.elementSize();
  auto* out = detail::bytePtr(args.out);
  if (args.out != args.in) std::memcpy(out, args.in, args.count * esize);
  const int left = (r - 1 + p) % p, right = (r + 1) % p;
  detail::Blocks blocks(args.count, p);
  const size_t chunk =
      std::max<size_t>(1, static_cast<size_t>(comm.params().tcp_chunk_bytes) / esize);
  const size_t seg = std::min(chunk, blocks.size(0));
  unsigned char* tmp = static_cast<unsigned char*>(comm.scratch(0, 2 * seg * esize));

  // Reduce-scatter: at step s send block r-s (complete after step s-1), receive block r-s-1.
  // Afterwards rank r holds the reduction of block r+1.
  for (int s = 0; s < p - 1; ++s) {
    const int sb = ((r - s) % p + p) % p, rb = ((r - s - 1) % p + p) % p;
    const size_t send_len = blocks.size(sb), recv_len = blocks.size(rb);
    for (size_t i = 0, k = 0; i < std::max(send_len, recv_len); i += seg, ++k) {
      size_t sn = i < send_len ? std::min(seg, send_len - i) : 0;
      size_t rn = i < recv_len ? std::min(seg, recv_len - i) : 0;
      unsigned char* buf = tmp + (k % 2) * seg * esize;
      detail::exchangeStep(comm, right, out + (blocks.begin(sb) + i) * esize, sn * esize, left, buf,
                           rn * esize);
      if (rn > 0) {
        kernels::reduceInto(out + (blocks.begin(rb) + i) * esize, buf, rn, args.dtype, args.op);
      }
    }
  }
  // Allgather: send block r+1-s, receive block r-s straight into place.
  for (int s = 0; s < p - 1; ++s) {
    const int sb = ((r + 1 - s) % p + p) % p, rb = ((r - s) % p + p) % p;
    std::vector<transport::SendOp> sends;
    std::vector<transport::RecvOp> recvs;
    if (blocks.size(sb) > 0) {
      sends.push_back({right, out + blocks.begin(sb) * esize, blocks.size(sb) * esize});
    }
    if (blocks.size(rb) > 0) {
      recvs.push_back({left, out + blocks.begin(rb) * esize, blocks.size(rb) * esize});
    }
    comm.exchange(std::move(sends), std::move(recvs));
  }
}

}  // namespace

extern const Algorithm kAllreduceRing = {
    "ring",
    Collective::kAllreduce,
    "ring reduce-scatter + allgather over the transport, pipelined in PERSEUS_TCP_CHUNK_BYTES "
    "segments; bandwidth-optimal",
    detail::elementwise,
    estimate,
    run};

}  // namespace perseus::collectives
