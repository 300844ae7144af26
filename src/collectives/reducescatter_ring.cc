// Ring reduce-scatterv over the transport: at step s rank r sends the running partial of
// block r-s-1 to its right neighbour and receives the partial of block r-s-2 from its left,
// combining it with its own input. After p-1 steps block r is complete on rank r. Each
// block's input is read at one step only, the last one writing straight into `out`, so
// `out` may alias this rank's block of `in`.
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
  return (p - 1) * c.alpha_us + (p - 1) / p * n * (c.beta_us_per_byte + c.gamma_us_per_byte);
}

void run(Communicator& comm, const CollectiveArgs& args) {
  const int p = comm.size(), r = comm.rank();
  const auto& counts = *args.sizes;
  const size_t esize = args.elementSize();
  const auto off = detail::offsetsOf(counts, esize);
  const size_t largest = *std::max_element(counts.begin(), counts.end()) * esize;
  // partial[0/1]: the partial sent this step and the one being built; recv: incoming partial.
  auto* scratch = static_cast<unsigned char*>(comm.scratch(0, 3 * largest));
  unsigned char* partial[2] = {scratch, scratch + largest};
  unsigned char* recv = scratch + 2 * largest;
  const auto* in = detail::bytePtr(args.in);
  const int left = (r - 1 + p) % p, right = (r + 1) % p;
  for (int s = 0; s < p - 1; ++s) {
    const int sb = ((r - s - 1) % p + p) % p, rb = ((r - s - 2) % p + p) % p;
    // Step 0 sends our raw input block; later steps send what the previous step built.
    const unsigned char* send = s == 0 ? in + off[sb] : partial[(s - 1) % 2];
    detail::exchangeStep(comm, right, send, counts[sb] * esize, left, recv, counts[rb] * esize);
    void* dst = s == p - 2 ? args.out : partial[s % 2];
    if (counts[rb] > 0) kernels::reduce2(dst, in + off[rb], recv, counts[rb], args.dtype, args.op);
  }
}

}  // namespace

extern const Algorithm kReducescattervRing = {"ring",
                                              Collective::kReducescatterv,
                                              "ring over the transport, p-1 steps",
                                              detail::anyCall,
                                              estimate,
                                              run};

}  // namespace perseus::collectives
