// Note [Adasum]
// Horovod's Adasum (adaptive summation): two gradients a and b combine as
//   adasum(a, b) = (1 - a.b / (2 |a|^2)) a + (1 - a.b / (2 |b|^2)) b
// (a coefficient stays 1 when its vector's squared norm is below 1e-8), and p = 2^k ranks as a
// binary tree of neighbours: adasum(adasum(g0, g1), adasum(g2, g3)) for four.
// It runs as vector halving, distance doubling. At level L = 1, 2, 4, ... rank r and r ^ L hold
// the same segment; each keeps one half and receives the other rank's data of that half, so it
// holds its half of both sides' combined vectors. The dot product and squared norms of the
// whole vectors are the sums of the halves' over the 2L ranks of the block, which an exchange
// of three doubles by recursive doubling gives each of them with the same bits. After the
// last level every rank holds 1/p of the result, and the segments travel back in reverse
// order (an allgather by recursive doubling). The coefficients belong to one tensor, so the
// engine never fuses Adasum tensors (fusion/tensor_groups.cc).
#include <cstring>
#include <vector>

#include "collectives/cost_model.h"
#include "collectives/detail.h"
#include "collectives/registry.h"
#include "kernels/adasum.h"

namespace perseus::collectives {
namespace {

struct Segment {
  size_t begin = 0, count = 0;
};

// The half of `whole` that the lower (left) or the upper (right) rank of a pair keeps.
Segment half(const Segment& whole, bool left) {
  const size_t low = whole.count / 2;
  return left ? Segment{whole.begin, low} : Segment{whole.begin + low, whole.count - low};
}

bool isPowerOfTwo(int n) { return n > 0 && (n & (n - 1)) == 0; }

bool supports(const Communicator& comm, const CollectiveArgs& args) {
  return args.op == ReduceOp::kAdasum && isPowerOfTwo(comm.size()) && isFloatingPoint(args.dtype);
}

double estimate(const Communicator& comm, const CollectiveArgs& args) {
  const auto c = cost::pointToPoint(comm);
  const double n = static_cast<double>(args.totalBytes());
  const double levels = cost::ceilLog2(comm.size());
  // Halving and doubling move 2n bytes in 2 log2(p) steps; each level adds log2(2L) small
  // exchanges for the norms and reads its half twice (dot products, then the combination).
  return 2 * levels * c.alpha_us + 2 * n * c.beta_us_per_byte +
         levels * (levels + 1) / 2 * c.alpha_us + 2 * n * c.gamma_us_per_byte;
}

// Sums v[0..2] over the `block` ranks (a power of two) that share rank / block; all of them get
// the same bits (each step adds the same two numbers on both partners).
void blockSum(Communicator& comm, double* v, int block) {
  double other[3];
  for (int m = 1; m < block; m <<= 1) {
    const int partner = comm.rank() ^ m;
    comm.sendRecv(partner, v, sizeof(other), partner, other, sizeof(other));
    for (int i = 0; i < 3; ++i) v[i] += other[i];
  }
}

double coefficient(double dot, double norm_sq) {
  return norm_sq >= 1e-8 ? 1.0 - dot / norm_sq * 0.5 : 1.0;
}

void run(Communicator& comm, const CollectiveArgs& args) {
  const int p = comm.size(), r = comm.rank();
  const size_t es = args.elementSize();
  unsigned char* data = detail::bytePtr(args.out);
  if (args.out != args.in) std::memcpy(args.out, args.in, args.count * es);
  void* theirs = comm.scratch(0, (args.count / 2 + 1) * es);
  std::vector<Segment> held;  // the segment held before each level
  Segment mine{0, args.count};
  for (int level = 1; level < p; level <<= 1) {
    const int partner = r ^ level;
    const bool left = (r & level) == 0;
    const Segment keep = half(mine, left), give = half(mine, !left);
    held.push_back(mine);
    detail::exchangeStep(comm, partner, data + give.begin * es, give.count * es, partner, theirs,
                         keep.count * es);
    void* own = data + keep.begin * es;
    const kernels::DotAndNorms d = kernels::dotAndNorms(own, theirs, keep.count, args.dtype);
    // {dot, left side's |.|^2, right side's |.|^2} over the whole vectors of this block.
    double v[3] = {d.dot, left ? d.a_norm_sq : d.b_norm_sq, left ? d.b_norm_sq : d.a_norm_sq};
    blockSum(comm, v, 2 * level);
    const double own_norm = left ? v[1] : v[2], their_norm = left ? v[2] : v[1];
    kernels::scaledAdd(own, coefficient(v[0], own_norm), theirs, coefficient(v[0], their_norm),
                       keep.count, args.dtype);
    mine = keep;
  }
  for (int level = p / 2; level >= 1; level >>= 1) {
    const int partner = r ^ level;
    const Segment whole = held.back();
    held.pop_back();
    const Segment other = half(whole, (r & level) != 0);
    detail::exchangeStep(comm, partner, data + mine.begin * es, mine.count * es, partner,
                         data + other.begin * es, other.count * es);
    mine = whole;
  }
}

}  // namespace

extern const Algorithm kAllreduceAdasum = {
    "adasum",
    Collective::kAllreduce,
    "Horovod's Adasum (op=Adasum only): scale-invariant pairwise combination by vector halving "
    "and distance doubling; a power-of-two number of ranks, floating-point tensors",
    supports,
    estimate,
    run};

}  // namespace perseus::collectives
