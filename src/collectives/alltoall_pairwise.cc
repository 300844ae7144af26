// Pairwise alltoallv over the transport: in step s rank r sends to r+s and receives from r-s,
// so every step is a perfect matching and no rank is flooded.
#include <cstring>

#include "collectives/cost_model.h"
#include "collectives/detail.h"
#include "collectives/registry.h"
#include "common/status.h"

namespace perseus::collectives {
namespace {

bool supports(const Communicator&, const CollectiveArgs&) { return true; }

double estimate(const Communicator& comm, const CollectiveArgs& args) {
  auto c = cost::pointToPoint(comm);
  return (comm.size() - 1) * c.alpha_us + args.totalBytes() * c.beta_us_per_byte;
}

void run(Communicator& comm, const CollectiveArgs& args) {
  const int p = comm.size(), r = comm.rank();
  const auto& send = *args.sizes;
  const auto& recv = *args.recv_sizes;
  const auto soff = detail::offsetsOf(send), roff = detail::offsetsOf(recv);
  const auto* in = detail::bytePtr(args.in);
  auto* out = detail::bytePtr(args.out);
  if (send[r] != recv[r]) {
    throw InvalidArgumentError(PERSEUS_STR("alltoallv on rank " << r << ": sends " << send[r]
                                           << " bytes to itself but expects " << recv[r]));
  }
  if (send[r] > 0) std::memmove(out + roff[r], in + soff[r], send[r]);
  for (int s = 1; s < p; ++s) {
    const int to = (r + s) % p, from = (r - s + p) % p;
    std::vector<transport::SendOp> sends;
    std::vector<transport::RecvOp> recvs;
    if (send[to] > 0) sends.push_back({to, in + soff[to], send[to]});
    if (recv[from] > 0) recvs.push_back({from, out + roff[from], recv[from]});
    comm.exchange(std::move(sends), std::move(recvs));
  }
}

}  // namespace

extern const Algorithm kAlltoallvPairwise = {
    "pairwise", Collective::kAlltoallv, "p-1 pairwise exchange steps over the transport",
    supports, estimate, run};

}  // namespace perseus::collectives
