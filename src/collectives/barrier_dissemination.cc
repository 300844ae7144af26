// Dissemination barrier over the transport: ceil(log2 p) rounds; in round i every rank
// signals rank r + 2^i and waits for rank r - 2^i, so after the last round every rank has
// (transitively) heard from every other.
#include "collectives/cost_model.h"
#include "collectives/detail.h"
#include "collectives/registry.h"

namespace perseus::collectives {
namespace {

double estimate(const Communicator& comm, const CollectiveArgs&) {
  return cost::ceilLog2(comm.size()) * cost::pointToPoint(comm).alpha_us;
}

void run(Communicator& comm, const CollectiveArgs&) {
  const int p = comm.size(), r = comm.rank();
  unsigned char token = 1, got = 0;
  for (int k = 1; k < p; k <<= 1) {
    comm.sendRecv((r + k) % p, &token, 1, (r - k + p) % p, &got, 1);
  }
}

}  // namespace

extern const Algorithm kBarrierDissemination = {"dissemination",
                                                Collective::kBarrier,
                                                "log2(p) rounds of one-byte messages",
                                                detail::anyCall,
                                                estimate,
                                                run};

}  // namespace perseus::collectives
