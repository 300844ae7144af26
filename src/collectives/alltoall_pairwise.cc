// Pairwise alltoallv over the transport: in step s rank r sends to r+s and receives from r-s,
// so every step is a perfect matching and no rank is flooded.
#include <cstring>

#include "collectives/detail.h"
#include "collectives/registry.h"
#include "common/status.h"

namespace perseus::collectives {
namespace {

void run(Communicator& comm, const CollectiveArgs& args) {
  const int p = comm.size(), r = comm.rank();
  const auto& send = *args.sizes;
  const auto& recv = *args.recv_sizes;
  const auto soff = detail::offsetsOf(send), roff = detail::offsetsOf(recv);
  const auto* in = detail::bytePtr(args.in);
  auto* out = detail::bytePtr(args.out);
  if (send[r] != recv[r]) {
    throw InvalidArgumentError(PERSEUS_STR("alltoallv on rank " << r << ": sends " << send[r]
                                                                << " bytes to itself but expects "
                                                                << recv[r]));
  }
  if (send[r] > 0) std::memmove(out + roff[r], in + soff[r], send[r]);
  for (int s = 1; s < p; ++s) {
    const int to = (r + s) % p, from = (r - s + p) % p;
    detail::exchangeStep(comm, to, in + soff[to], send[to], from, out + roff[from], recv[from]);
  }
}

}  // namespace

extern const Algorithm kAlltoallvPairwise = {
    "pairwise",      Collective::kAlltoallv,    "p-1 pairwise exchange steps over the transport",
    detail::anyCall, detail::oneMessagePerPeer, run};

}  // namespace perseus::collectives
