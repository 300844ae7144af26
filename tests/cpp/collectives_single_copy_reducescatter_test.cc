// The single-copy reduce-scatter (Note [Single-copy reduce-scatter],
// reducescatter_single_copy.cc) between real forked processes over the shared-memory transport
// and arena: sums, maxima and a postscale, blocks that differ among the members (one empty, one
// longer than a read chunk), an output that aliases the member's own block of its input; the
// agreed fall-back to the slot rounds when one rank does not read (PERSEUS_SHM_SINGLE_COPY=0
// there), with the right sums and single-copy never chosen again; and the cost model's choice:
// offered only to members with one reduce thread each.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "collectives/collectives.h"
#include "collectives/communicator.h"
#include "collectives/registry.h"
#include "support/forked_shm.h"
#include "support/shm_groups.h"

namespace perseus::collectives {
namespace {

using perseus::testing::crossMemoryPermitted;
using perseus::testing::shmTestParams;

// Small integers, so float sums are exact whatever the order.
float valueOf(int rank, size_t i) { return static_cast<float>((rank * 5 + i * 3) % 97); }

// Runs one reduce-scatter of `counts` floats with `algorithm` (empty: by cost) and checks this
// member's block; 0 ok, else `fail`.
int reduceScatterOnce(Communicator& comm, const std::vector<size_t>& counts, bool aliased,
                      ReduceOp op, double postscale, const std::string& algorithm, int fail) {
  const int n = comm.size(), r = comm.rank();
  size_t total = 0, first = 0;
  for (int q = 0; q < n; ++q) {
    if (q == r) first = total;
    total += counts[static_cast<size_t>(q)];
  }
  const size_t mine = counts[static_cast<size_t>(r)];
  std::vector<float> in(total), out(mine, -1.0f);
  for (size_t i = 0; i < total; ++i) in[i] = valueOf(r, i);
  CollectiveArgs a;
  a.kind = Collective::kReducescatterv;
  a.in = in.data();
  a.out = aliased ? in.data() + first : out.data();
  a.sizes = &counts;
  a.dtype = DataType::kFloat32;
  a.op = op;
  a.postscale = postscale;
  runCollective(comm, a, algorithm);
  const float* got = aliased ? in.data() + first : out.data();
  for (size_t i = 0; i < mine; ++i) {
    float want = valueOf(0, first + i);
    for (int q = 1; q < n; ++q) {
      const float v = valueOf(q, first + i);
      want = op == ReduceOp::kMax ? std::max(want, v) : want + v;
    }
    want = static_cast<float>(want * postscale);
    if (got[i] != want) return fail;
  }
  return 0;
}

// Child exit codes: 1x a wrong result of case x, 41 it fell back although every rank could
// read, 42 it did not fall back although one rank would not read, 44 single-copy was chosen
// after the members agreed to fall back, 45 the cost model did not choose it for a large
// reduce-scatter of members with one reduce thread, 46 it chose it with several.
int runRank(int r, const Params& params, Communicator& comm, bool expect_fallback) {
  const std::string forced = "single-copy";
  const int n = comm.size();
  auto counts = [n](size_t each, size_t last) {
    std::vector<size_t> c(static_cast<size_t>(n), each);
    c.back() = last;
    return c;
  };
  struct Case {
    std::vector<size_t> counts;
    bool aliased;
    ReduceOp op;
    double postscale;
  };
  const Case cases[] = {{counts(1, 1), false, ReduceOp::kSum, 1.0},
                        {counts(300007, 65536 * 2 + 3), false, ReduceOp::kSum, 0.5},
                        {counts(77777, 0), true, ReduceOp::kMax, 1.0},
                        {counts(100000, 100000), true, ReduceOp::kSum, 0.25}};
  int k = 0;
  for (const Case& c : cases) {
    // Once the members fell back, single-copy is no longer offered on this communicator, and
    // where the members have cores to spare it is not offered at all.
    const bool offered = !comm.singleCopyFailed() && params.reduce_threads == 1;
    const std::string algorithm = offered ? forced : std::string();
    if (int err =
            reduceScatterOnce(comm, c.counts, c.aliased, c.op, c.postscale, algorithm, 10 + k))
      return err;
    ++k;
  }
  const std::vector<size_t> big_counts = counts(1 << 20, 1 << 20);
  CollectiveArgs big;
  big.kind = Collective::kReducescatterv;
  big.sizes = &big_counts;
  big.dtype = DataType::kFloat32;
  const std::string chosen = selectAlgorithm(comm, big, "").name;
  if (expect_fallback) {
    if (!comm.singleCopyFailed()) return 42;
    return chosen == forced ? 44 : 0;
  }
  if (crossMemoryPermitted() && comm.singleCopyFailed()) return 41;
  if (!crossMemoryPermitted()) return 0;
  if (params.reduce_threads == 1 && chosen != forced) return 45;
  if (params.reduce_threads > 1 && chosen == forced) return 46;
  (void)r;
  return 0;
}

void expectRanksOk(int n, const std::function<Params(int)>& params_of, bool expect_fallback) {
  perseus::testing::expectForkedShmRanksOk(n, "single-copy-reducescatter", params_of,
                                           [&](int r, const Params& params, Communicator& comm) {
                                             return runRank(r, params, comm, expect_fallback);
                                           });
}

Params oneReduceThread() {
  Params p = shmTestParams();
  p.reduce_threads = 1;
  return p;
}

TEST(SingleCopyReduceScatter, GivesEveryRankItsReducedBlock) {
  for (int ranks : {2, 3}) {
    SCOPED_TRACE(ranks);
    expectRanksOk(
        ranks, [](int) { return oneReduceThread(); }, false);
  }
}

TEST(SingleCopyReduceScatter, IsLeftToTheSlotRoundsWhereRanksHaveCoresToSpare) {
  expectRanksOk(
      2,
      [](int) {
        Params p = shmTestParams();
        p.reduce_threads = 2;
        return p;
      },
      false);
}

TEST(SingleCopyReduceScatter, ARankThatDoesNotReadSendsEveryRankThroughTheSlots) {
  expectRanksOk(
      3,
      [](int r) {
        Params p = oneReduceThread();
        p.shm_single_copy = r != 1;
        return p;
      },
      true);
}

}  // namespace
}  // namespace perseus::collectives
