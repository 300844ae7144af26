// Ring allgatherv over the transport: p-1 steps, each forwarding the block received in the
// previous step to the right neighbour, received straight into its place in the output.
#include <cstring>

#include "collectives/cost_model.h"
#include "collectives/detail.h"
#include "collectives/registry.h"

namespace perseus::collectives {
namespace {

bool supports(const Communicator&, const CollectiveArgs&) { return true; }

double estimate(const Communicator& comm, const CollectiveArgs& args) {
  auto c = cost::pointToPoint(comm);
  double p = comm.size(), n = static_cast<double>(args.totalBytes());
  return (p - 1) * c.alpha_us + (p - 1) / p * n * c.beta_us_per_byte;
}

void run(Communicator& comm, const CollectiveArgs& args) {
  const int p = comm.size(), r = comm.rank();
  const auto& bytes = *args.sizes;
  const auto off = detail::offsetsOf(bytes);
  auto* out = detail::bytePtr(args.out);
  if (out + off[r] != args.in && bytes[r] > 0) std::memmove(out + off[r], args.in, bytes[r]);
  const int left = (r - 1 + p) % p, right = (r + 1) % p;
  for (int s = 0; s < p - 1; ++s) {
    const int sb = ((r - s) % p + p) % p, rb = ((r - s - 1) % p + p) % p;
    std::vector<transport::SendOp> sends;
    std::vector<transport::RecvOp> recvs;
    if (bytes[sb] > 0) sends.push_back({right, out + off[sb], bytes[sb]});
    if (bytes[rb] > 0) recvs.push_back({left, out + off[rb], bytes[rb]});
    comm.exchange(std::move(sends), std::move(recvs));
  }
}

}  // namespace

extern const Algorithm kAllgathervRing = {
    "ring", Collective::kAllgatherv, "ring over the transport, p-1 steps", supports, estimate, run};

}  // namespace perseus::collectives
