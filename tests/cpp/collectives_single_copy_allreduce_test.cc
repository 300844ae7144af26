// The single-copy allreduce (Note [Single-copy allreduce], allreduce_single_copy.cc) between
// real forked processes over the shared-memory transport and arena: sums, maxima and a
// postscale, counts that do not split evenly among the members (and blocks longer than one read
// chunk), in place, and out of place on every member or on some, which all members then run
// through the slots; the agreed fall-back to the slot algorithm when one rank does not read
// (PERSEUS_SHM_SINGLE_COPY=0 there), with the right sums and single-copy never chosen again;
// and the cost model's choice: offered only to members with one reduce thread each, and only
// from 2 to 16 MiB.
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
float valueOf(int rank, size_t i) { return static_cast<float>((rank * 7 + i * 3) % 101); }

// Runs one allreduce of `count` floats with `algorithm` (empty: by cost) and checks it; 0 ok,
// else `fail`.
int allreduceOnce(Communicator& comm, size_t count, bool in_place, ReduceOp op, double postscale,
                  const std::string& algorithm, int fail) {
  const int n = comm.size(), r = comm.rank();
  std::vector<float> in(count), out(count, -1.0f);
  for (size_t i = 0; i < count; ++i) in[i] = valueOf(r, i);
  CollectiveArgs a;
  a.kind = Collective::kAllreduce;
  a.in = in.data();
  a.out = in_place ? in.data() : out.data();
  a.count = count;
  a.dtype = DataType::kFloat32;
  a.op = op;
  a.postscale = postscale;
  runCollective(comm, a, algorithm);
  const std::vector<float>& got = in_place ? in : out;
  for (size_t i = 0; i < count; ++i) {
    float want = valueOf(0, i);
    for (int q = 1; q < n; ++q)
      want = op == ReduceOp::kMax ? std::max(want, valueOf(q, i)) : want + valueOf(q, i);
    want = static_cast<float>(want * postscale);
    if (got[i] != want) return fail;
  }
  if (!in_place && in[count - 1] != valueOf(r, count - 1)) return fail + 1;  // input untouched
  return 0;
}

// Child exit codes: 1x a wrong result of case x, 41 it fell back although every rank could
// read, 42 it did not fall back although one rank would not read, 44 single-copy was chosen
// after the members agreed to fall back, 45 the cost model did not choose single-copy for a
// large allreduce of members with one reduce thread, 46 it chose it with several, 47 it chose
// it above its largest size, 48 below its smallest.
int runRank(int r, const Params& params, Communicator& comm, bool expect_fallback) {
  const std::string forced = "single-copy";
  enum Place { kAll, kNone, kRankZero };  // which members run in place
  struct Case {
    size_t count;
    Place in_place;
    ReduceOp op;
    double postscale;
  };
  const Case cases[] = {{1, kAll, ReduceOp::kSum, 1.0},
                        {1000003, kAll, ReduceOp::kSum, 1.0},
                        {(size_t{1} << 20) + 12345, kNone, ReduceOp::kSum, 0.5},
                        {77777, kAll, ReduceOp::kMax, 1.0},
                        {65536 * 3 + 5, kRankZero, ReduceOp::kMax, 1.0},
                        {300001, kAll, ReduceOp::kSum, 0.25}};
  int k = 0;
  for (const Case& c : cases) {
    // Once the members fell back, single-copy is no longer offered on this communicator.
    // and where the members have cores to spare it is not offered at all.
    const bool offered = !comm.singleCopyFailed() && params.reduce_threads == 1;
    const std::string algorithm = offered ? forced : std::string();
    const bool in_place = c.in_place == kAll || (c.in_place == kRankZero && r == 0);
    if (int err = allreduceOnce(comm, c.count, in_place, c.op, c.postscale, algorithm, 10 + k))
      return err;
    k += 2;
  }
  CollectiveArgs big;
  big.kind = Collective::kAllreduce;
  big.count = 4 << 20;
  big.dtype = DataType::kFloat32;
  const std::string chosen = selectAlgorithm(comm, big, "").name;
  big.count = 8 << 20;
  if (selectAlgorithm(comm, big, "").name == forced) return 47;
  big.count = 256 << 10;
  if (selectAlgorithm(comm, big, "").name == forced) return 48;
  if (expect_fallback) {
    if (!comm.singleCopyFailed()) return 42;
    return chosen == forced ? 44 : 0;
  }
  if (crossMemoryPermitted() && comm.singleCopyFailed()) return 41;
  if (!crossMemoryPermitted()) return 0;
  if (params.reduce_threads == 1 && chosen != forced) return 45;
  if (params.reduce_threads > 1 && chosen == forced) return 46;
  return 0;
}

void expectRanksOk(int n, const std::function<Params(int)>& params_of, bool expect_fallback) {
  perseus::testing::expectForkedShmRanksOk(n, "single-copy-allreduce", params_of,
                                           [&](int r, const Params& params, Communicator& comm) {
                                             return runRank(r, params, comm, expect_fallback);
                                           });
}

Params oneReduceThread() {
  Params p = shmTestParams();
  p.reduce_threads = 1;
  return p;
}

TEST(SingleCopyAllreduce, GivesEveryRankTheReducedVector) {
  for (int ranks : {2, 3}) {
    SCOPED_TRACE(ranks);
    expectRanksOk(
        ranks, [](int) { return oneReduceThread(); }, false);
  }
}

TEST(SingleCopyAllreduce, IsLeftToTheSlotPipelineWhereRanksHaveCoresToSpare) {
  expectRanksOk(
      2,
      [](int) {
        Params p = shmTestParams();
        p.reduce_threads = 2;
        return p;
      },
      false);
}

TEST(SingleCopyAllreduce, ARankThatDoesNotReadSendsEveryRankThroughTheSlots) {
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
