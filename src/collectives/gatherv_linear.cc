// Gatherv over the transport: the root receives from every rank at once (the transport
// progresses all receives together), the others send once.
#include <cstring>

#include "collectives/cost_model.h"
#include "collectives/detail.h"
#include "collectives/registry.h"

namespace perseus::collectives {
namespace {

bool supports(const Communicator&, const CollectiveArgs&) { return true; }

double estimate(const Communicator& comm, const CollectiveArgs& args) {
  auto c = cost::pointToPoint(comm);
  return (comm.size() - 1) * c.alpha_us + args.totalBytes() * c.beta_us_per_byte;
}

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
    "linear", Collective::kGatherv, "every rank sends to the root directly", supports, estimate,
    run};

}  // namespace perseus::collectives
