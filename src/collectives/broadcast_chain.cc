// Pipelined chain broadcast over the transport: root -> root+1 -> ... in
// Params::tcp_chunk_bytes segments; each rank forwards segment k-1 while receiving segment k,
// so a large vector costs about one transfer time plus p-2 segments.
#include <algorithm>

#include "collectives/cost_model.h"
#include "collectives/detail.h"
#include "collectives/registry.h"

namespace perseus::collectives {
namespace {

size_t segmentBytes(const Communicator& comm) {
  return static_cast<size_t>(std::max<int64_t>(1, comm.params().tcp_chunk_bytes));
}

double estimate(const Communicator& comm, const CollectiveArgs& args) {
  auto c = cost::pointToPoint(comm);
  double seg = static_cast<double>(std::min(segmentBytes(comm), args.bytes));
  double nseg = std::ceil(static_cast<double>(args.bytes) / std::max(seg, 1.0));
  double steps = nseg + comm.size() - 2;
  return steps * (c.alpha_us + seg * c.beta_us_per_byte);
}

void run(Communicator& comm, const CollectiveArgs& args) {
  const int p = comm.size();
  const int vrank = (comm.rank() - args.root + p) % p;
  const int prev = vrank == 0 ? -1 : (comm.rank() - 1 + p) % p;
  const int next = vrank == p - 1 ? -1 : (comm.rank() + 1) % p;
  const size_t seg = segmentBytes(comm);
  const size_t nseg = (args.bytes + seg - 1) / seg;
  auto* data = detail::bytePtr(args.out);
  auto len = [&](size_t k) { return std::min(seg, args.bytes - k * seg); };
  // Iteration k receives segment k and forwards segment k-1 (the root forwards segment k).
  const size_t lag = prev < 0 ? 0 : 1;
  for (size_t k = 0; k < nseg + lag; ++k) {
    std::vector<transport::SendOp> sends;
    std::vector<transport::RecvOp> recvs;
    if (next >= 0 && k >= lag) sends.push_back({next, data + (k - lag) * seg, len(k - lag)});
    if (prev >= 0 && k < nseg) recvs.push_back({prev, data + k * seg, len(k)});
    comm.exchange(std::move(sends), std::move(recvs));
  }
}

}  // namespace

extern const Algorithm kBroadcastChain = {
    "chain",
    Collective::kBroadcast,
    "pipelined chain over the transport in PERSEUS_TCP_CHUNK_BYTES segments; for large vectors",
    detail::anyCall,
    estimate,
    run};

}  // namespace perseus::collectives
