// Gatherv over the transport: the root receives from every rank at once (the transport
// progresses all receives together), the others send once.
#include <cstring>

#include "collectives/detail.h"
#include "collectives/registry.h"

namespace perseus::collectives {
namespace {

void run(Communicator& comm, const CollectiveArgs& args) {
  const int p = comm.size(), r = comm.rank();
  const auto& bytes = *args.sizes;
  if (r != args.root) {
    if (bytes[r] > 0) comm.sendRecv(args.root, args.in, bytes[r], -1, nullptr, 0);
    return;
  }
  const auto off = detail::offsetsOf(bytes);
  auto* out = detail::bytePtr(args.out);
  if (bytes[r] > 0 && out + off[r] != args.in) std::memmove(out + off[r], args.in, bytes[r]);
  std::vector<transport::RecvOp> recvs;
  for (int q = 0; q < p; ++q) {
    if (q != r && bytes[q] > 0) recvs.push_back({q, out + off[q], bytes[q]});
  }
  comm.exchange({}, std::move(recvs));
}

}  // namespace

extern const Algorithm kGathervLinear = {
    "linear",        Collective::kGatherv,      "every rank sends to the root directly",
    detail::anyCall, detail::oneMessagePerPeer, run};

}  // namespace perseus::collectives
