// Binomial-tree broadcast over the transport: ceil(log2 p) rounds; in round i every rank that
// has the data sends it to the rank 2^i further (relative to the root). Latency-optimal.
#include "collectives/cost_model.h"
#include "collectives/detail.h"
#include "collectives/registry.h"

namespace perseus::collectives {
namespace {

double estimate(const Communicator& comm, const CollectiveArgs& args) {
  auto c = cost::pointToPoint(comm);
  return cost::ceilLog2(comm.size()) * (c.alpha_us + args.bytes * c.beta_us_per_byte);
}

void run(Communicator& comm, const CollectiveArgs& args) {
  const int p = comm.size();
  const int vrank = (comm.rank() - args.root + p) % p;
  auto real = [&](int v) { return (v + args.root) % p; };
  int mask = 1;
  while (mask < p) {
    if (vrank & mask) {
      comm.sendRecv(-1, nullptr, 0, real(vrank - mask), args.out, args.bytes);
      break;
    }
    mask <<= 1;
  }
  // Children: vrank + m for every m below the bit we received on, largest subtree first.
  std::vector<transport::SendOp> sends;
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (vrank + mask < p) sends.push_back({real(vrank + mask), args.out, args.bytes});
  }
  if (!sends.empty()) comm.exchange(std::move(sends), {});
}

}  // namespace

extern const Algorithm kBroadcastBinomial = {"binomial",
                                             Collective::kBroadcast,
                                             "binomial tree over the transport; latency-optimal",
                                             detail::anyCall,
                                             estimate,
                                             run};

}  // namespace perseus::collectives
