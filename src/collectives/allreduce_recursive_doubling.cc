// Recursive doubling over the transport: log2(p) exchanges of the whole vector, the
// latency-optimal choice for small vectors. A non-power-of-two size p = 2^k + rem first folds
// ranks 0..2*rem-1 pairwise (the even one hands its vector to the odd one and sits out), and
// hands the result back at the end (MPICH's scheme). Partners combine lower rank's data first,
// so every rank computes the same bits.
#include <cstring>

#include "collectives/cost_model.h"
#include "collectives/detail.h"
#include "collectives/registry.h"
#include "kernels/reduce.h"

namespace perseus::collectives {
namespace {

double estimate(const Communicator& comm, const CollectiveArgs& args) {
  auto c = cost::pointToPoint(comm);
  int p = comm.size();
  int pof2 = 1;
  while (pof2 * 2 <= p) pof2 *= 2;
  double n = static_cast<double>(args.totalBytes());
  double steps = cost::ceilLog2(pof2) + (pof2 != p ? 2 : 0);
  return steps * (c.alpha_us + n * c.beta_us_per_byte) +
         cost::ceilLog2(p) * n * c.gamma_us_per_byte;
}

void run(Communicator& comm, const CollectiveArgs& args) {
  const int p = comm.size(), r = comm.rank();
  const size_t bytes = args.count * args.elementSize();
  auto* out = args.out;
  if (args.out != args.in) std::memcpy(out, args.in, bytes);
  void* tmp = comm.scratch(0, bytes);
  int pof2 = 1;
  while (pof2 * 2 <= p) pof2 *= 2;
  const int rem = p - pof2;

  int vrank;  // rank among the power-of-two group, or -1 when sitting out
  if (r < 2 * rem) {
    if (r % 2 == 0) {
      comm.sendRecv(r + 1, out, bytes, -1, nullptr, 0);
      vrank = -1;
    } else {
      comm.sendRecv(-1, nullptr, 0, r - 1, tmp, bytes);
      kernels::reduce2(out, tmp, out, args.count, args.dtype, args.op);
      vrank = r / 2;
    }
  } else {
    vrank = r - rem;
  }
  if (vrank >= 0) {
    for (int mask = 1; mask < pof2; mask <<= 1) {
      const int vpartner = vrank ^ mask;
      const int partner = vpartner < rem ? vpartner * 2 + 1 : vpartner + rem;
      comm.sendRecv(partner, out, bytes, partner, tmp, bytes);
      if (partner < r) {
        kernels::reduce2(out, tmp, out, args.count, args.dtype, args.op);
      } else {
        kernels::reduceInto(out, tmp, args.count, args.dtype, args.op);
      }
    }
  }
  if (r < 2 * rem) {
    if (r % 2 == 0) {
      comm.sendRecv(-1, nullptr, 0, r + 1, out, bytes);
    } else {
      comm.sendRecv(r - 1, out, bytes, -1, nullptr, 0);
    }
  }
}

}  // namespace

extern const Algorithm kAllreduceRecursiveDoubling = {
    "recursive_doubling",
    Collective::kAllreduce,
    "log2(p) whole-vector exchanges over the transport; latency-optimal for small vectors, any "
    "number of ranks",
    detail::elementwise,
    estimate,
    run};

}  // namespace perseus::collectives
