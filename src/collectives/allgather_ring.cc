// Ring allgatherv over the transport: p-1 steps, each forwarding the block received in the
// previous step to the right neighbour, received straight into its place in the output.
#include <cstring>

#include "collectives/cost_model.h"
#include "collectives/detail.h"
#include "collectives/registry.h"

namespace perseus::collectives {
namespace {

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
    detail::exchangeStep(comm, right, out + off[sb], bytes[sb], left, out + off[rb], bytes[rb]);
  }
}

}  // namespace

extern const Algorithm kAllgathervRing = {"ring",
                                          Collective::kAllgatherv,
                                          "ring over the transport, p-1 steps",
                                          detail::anyCall,
                                          estimate,
                                          run};

}  // namespace perseus::collectives
