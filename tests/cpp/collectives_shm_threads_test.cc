// The shared-memory allreduce with several threads per rank (Note [Reduce threads],
// allreduce_shm.cc): the thread policy, and every dtype x op with PERSEUS_REDUCE_THREADS = 1,
// 2, 3 for 2 and 3 ranks (as threads), odd counts over several segments, in and out of place,
// bit for bit against the reference.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "collectives/collectives.h"
#include "collectives/registry.h"
#include "common/reduce_threads.h"
#include "common/status.h"
#include "common/worker_pool.h"
#include "support/inproc_values.h"
#include "support/inproc_world.h"
#include "support/shm_groups.h"

namespace perseus::collectives {
namespace {

using testing::Bytes;

TEST(ReduceThreads, AutoSplitsTheCpusAmongTheLocalRanks) {
  EXPECT_EQ(reduce_threads::requestedReduceThreads(0, 2, 2), 1);  // 2 CPUs, 2 ranks: unchanged
  EXPECT_EQ(reduce_threads::requestedReduceThreads(0, 1, 3), 1);
  EXPECT_EQ(reduce_threads::requestedReduceThreads(0, 16, 2), 8);  // the GPU host: 8 per rank
  EXPECT_EQ(reduce_threads::requestedReduceThreads(0, 12, 4), 3);
  EXPECT_EQ(reduce_threads::requestedReduceThreads(0, 192, 2),
            reduce_threads::kAutoMaxReduceThreads);
  EXPECT_EQ(reduce_threads::requestedReduceThreads(3, 2, 2), 3);  // forced
}

TEST(ReduceThreads, FewerThreadsWhenTheBufferOrMessageIsSmall) {
  const size_t kib = 1024;
  // The default 1 MiB slot: buffers of ~338 KiB give at most 5 shares of 64 KiB.
  EXPECT_EQ(reduce_threads::effectiveReduceThreads(8, 64u << 20, 338 * kib), 5);
  EXPECT_EQ(reduce_threads::effectiveReduceThreads(8, 64u << 20, 2048 * kib), 8);
  EXPECT_EQ(reduce_threads::effectiveReduceThreads(8, 100 * kib, 2048 * kib), 1);
  EXPECT_EQ(reduce_threads::effectiveReduceThreads(8, 200 * kib, 2048 * kib), 3);
  EXPECT_EQ(reduce_threads::effectiveReduceThreads(1, 64u << 20, 2048 * kib), 1);
  EXPECT_EQ(reduce_threads::segmentBytes(1, 338 * kib), 256 * kib);  // the single-thread segment
  EXPECT_EQ(reduce_threads::segmentBytes(4, 2048 * kib), 1024 * kib);
  EXPECT_EQ(reduce_threads::segmentBytes(5, 338 * kib), 338 * kib);
  EXPECT_EQ(Params::fromEnvironment([](const char*) { return nullptr; }).reduce_threads, 0);
  auto with = [](const char* value) {
    return Params::fromEnvironment([value](const char* name) {
      return std::string(name) == "PERSEUS_REDUCE_THREADS" ? value : nullptr;
    });
  };
  EXPECT_EQ(with("4").reduce_threads, 4);
  EXPECT_THROW(with("-1"), InvalidArgumentError);
  EXPECT_THROW(with("many"), InvalidArgumentError);
}

constexpr DataType kTypes[] = {DataType::kUInt8,   DataType::kInt8,    DataType::kInt32,
                               DataType::kInt64,   DataType::kFloat16, DataType::kBFloat16,
                               DataType::kFloat32, DataType::kFloat64, DataType::kBool};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct};

// 1 MiB slots: five pipeline buffers of ~203 KiB, enough for 3 threads of 64 KiB each, so the
// vectors below run 3 segments or more with 3 threads (fewer segments than the pipeline's
// depth, too: Note [Pipeline lag]).
constexpr size_t kSlotBytes = 1024 * 1024;
// Odd element counts of about 450 KiB for every element size.
size_t countFor(DataType t) { return (450 * 1024) / dataTypeSize(t) + 7; }

class ShmThreads : public ::testing::TestWithParam<std::tuple<int, int, const char*>> {
 protected:
  // References are the same for every thread count: computed once per world size.
  static const Bytes& reference(int size, DataType t, ReduceOp op) {
    static std::map<std::tuple<int, DataType, ReduceOp>, Bytes> cache;
    auto key = std::make_tuple(size, t, op);
    auto it = cache.find(key);
    if (it == cache.end()) {
      it = cache.emplace(key, testing::referenceReduce(size, countFor(t), t, op)).first;
    }
    return it->second;
  }
};

TEST_P(ShmThreads, EveryTypeAndOpMatchesTheReference) {
  auto [size, threads, stores] = GetParam();
  testing::InProcWorldOptions o;
  o.size = size;
  o.slot_bytes = kSlotBytes;
  o.params.reduce_threads = threads;
  o.params.shm_stores = stores;  // Note [Slot stores]: both ways of writing the slots
  for (DataType t : kTypes) {
    for (ReduceOp op : kOps) reference(size, t, op);  // before the ranks start: no locking
  }
  testing::InProcWorld world(o);
  world.runOk([&](int rank) {
    auto comm = world.makeWorldComm(rank);
    for (DataType t : kTypes) {
      for (ReduceOp op : kOps) {
        const size_t count = countFor(t);
        const bool in_place = (static_cast<int>(t) + static_cast<int>(op)) % 2 == 0;
        Bytes in = testing::testVector(rank, count, t), out(in.size(), 0xEE);
        CollectiveArgs args;
        args.kind = Collective::kAllreduce;
        args.in = in.data();
        args.out = in_place ? in.data() : out.data();
        args.count = count;
        args.dtype = t;
        args.op = op;
        runCollective(*comm, args, "shm");
        long bad = testing::firstDifference(in_place ? in : out, reference(size, t, op), t);
        if (bad >= 0) {
          throw std::runtime_error(PERSEUS_STR(
              threads << " threads, " << stores << " stores, " << dataTypeName(t) << " "
                      << reduceOpName(op) << " count " << count << (in_place ? " in place" : "")
                      << ": first wrong element " << bad));
        }
      }
    }
  });
  if (threads > 1) {
    EXPECT_GE(WorkerPool::instance().workers(), threads - 1);
  }
}

INSTANTIATE_TEST_SUITE_P(RanksAndThreads, ShmThreads,
                         ::testing::Combine(::testing::Values(2, 3), ::testing::Values(1, 2, 3),
                                            ::testing::Values("cached", "streaming")),
                         [](const auto& info) {
                           return std::to_string(std::get<0>(info.param)) + "_ranks_" +
                                  std::to_string(std::get<1>(info.param)) + "_threads_" +
                                  std::get<2>(info.param);
                         });

// Note [Reduce-scatter threads]: rounds split among 1 or 3 threads give each rank its block of
// the reference reduction, out of place (float32 sum) and in place over the rank's own block
// of the input (float16 max), with odd blocks that leave the last runs short or empty.
void expectShmReduceScatter(int size, int threads) {
  const std::vector<size_t> counts = [&] {
    std::vector<size_t> c(static_cast<size_t>(size));
    for (int q = 0; q < size; ++q) c[static_cast<size_t>(q)] = 150001 + 70003 * q;
    c.back() = 5;  // a block far shorter than one run
    return c;
  }();
  size_t total = 0;
  for (size_t n : counts) total += n;
  const Bytes sums = testing::referenceReduce(size, total, DataType::kFloat32, ReduceOp::kSum, 8);
  const Bytes maxes = testing::referenceReduce(size, total, DataType::kFloat16, ReduceOp::kMax, 9);
  testing::InProcWorldOptions o;
  o.size = size;
  o.slot_bytes = kSlotBytes;
  o.params.reduce_threads = threads;
  testing::InProcWorld world(o);
  world.runOk([&](int rank) {
    auto comm = world.makeWorldComm(rank);
    size_t at = 0;
    for (int q = 0; q < rank; ++q) at += counts[static_cast<size_t>(q)];
    const size_t mine = counts[static_cast<size_t>(rank)];
    Bytes in = testing::testVector(rank, total, DataType::kFloat32, 8), out(mine * 4, 0xEE);
    CollectiveArgs args;
    args.kind = Collective::kReducescatterv;
    args.in = in.data();
    args.out = out.data();
    args.sizes = &counts;
    args.dtype = DataType::kFloat32;
    args.op = ReduceOp::kSum;
    runCollective(*comm, args, "shm");
    if (!std::equal(out.begin(), out.end(), sums.begin() + static_cast<long>(at * 4)))
      throw std::runtime_error(PERSEUS_STR(threads << " threads: wrong float32 block"));
    Bytes half = testing::testVector(rank, total, DataType::kFloat16, 9);
    args.in = half.data();
    args.out = half.data() + at * 2;  // in place: the rank's own block of the input
    args.dtype = DataType::kFloat16;
    args.op = ReduceOp::kMax;
    runCollective(*comm, args, "shm");
    if (!std::equal(half.begin() + static_cast<long>(at * 2),
                    half.begin() + static_cast<long>((at + mine) * 2),
                    maxes.begin() + static_cast<long>(at * 2)))
      throw std::runtime_error(PERSEUS_STR(threads << " threads: wrong in-place float16 block"));
  });
}

TEST(ShmReduceScatterThreads, TwoRanks) {
  expectShmReduceScatter(2, 1);
  expectShmReduceScatter(2, 3);
}

TEST(ShmReduceScatterThreads, ThreeRanks) { expectShmReduceScatter(3, 3); }

// A float32 sum of `count` elements on 2 in-process ranks through "shm", out of place and then
// in place, checked against the reference.
void expectShmSums(size_t count, int threads, int seed) {
  testing::InProcWorldOptions o;
  o.size = 2;
  o.slot_bytes = kSlotBytes;
  o.params.reduce_threads = threads;
  const Bytes expected =
      testing::referenceReduce(2, count, DataType::kFloat32, ReduceOp::kSum, seed);
  testing::InProcWorld world(o);
  world.runOk([&](int rank) {
    auto comm = world.makeWorldComm(rank);
    Bytes in = testing::testVector(rank, count, DataType::kFloat32, seed), out(in.size());
    CollectiveArgs args;
    args.kind = Collective::kAllreduce;
    args.in = in.data();
    args.out = out.data();
    args.count = count;
    args.dtype = DataType::kFloat32;
    runCollective(*comm, args, "shm");
    if (out != expected)
      throw std::runtime_error("wrong float32 sum out of place, " + std::to_string(count));
    args.out = in.data();
    runCollective(*comm, args, "shm");
    if (in != expected)
      throw std::runtime_error("wrong float32 sum in place, " + std::to_string(count));
  });
}

// Outputs out of place of 4 MiB and more are streamed out with non-temporal stores, by every
// thread; in place they are not. Both give the sum.
TEST(ShmThreadsStreaming, LargeOddVectorWithTwoThreads) {
  expectShmSums((size_t{16} << 20) / 4 + 3, 2, 5);
}

// Out of place, outputs are streamed from 4 MiB; in place never. Both give the sum.
TEST(ShmThreadsStreaming, FourMiBOutOfPlaceStreamsAndInPlaceDoesNot) {
  expectShmSums((size_t{4} << 20) / 4 + 5, 1, 6);
}

// The real shared-memory arena (futex barriers, the segments' slots), ranks as threads: every
// barrier is bounded by PERSEUS_TIMEOUT, so a hang fails the test.
TEST(ShmThreadsRealArena, ThreeThreadsPerRank) {
  const int n = 2;
  Params params = testing::shmTestParams();
  params.shm_slot_bytes = kSlotBytes;
  params.reduce_threads = 3;
  const size_t big = 1000003, odd = 333331;
  const Bytes want_big = testing::referenceReduce(n, big, DataType::kFloat32, ReduceOp::kSum, 3);
  const Bytes want_odd = testing::referenceReduce(n, odd, DataType::kFloat16, ReduceOp::kMax, 4);
  auto errors = testing::runOnShmCommunicators(
      n, "mt" + std::to_string(::getpid()), params, [&](int r, Communicator& comm) {
        Bytes in = testing::testVector(r, big, DataType::kFloat32, 3), out(in.size());
        CollectiveArgs args;
        args.in = in.data();
        args.out = out.data();
        args.count = big;
        args.dtype = DataType::kFloat32;
        runCollective(comm, args, "shm");
        if (out != want_big) throw std::runtime_error("wrong float32 sum");
        Bytes half = testing::testVector(r, odd, DataType::kFloat16, 4);
        args.in = args.out = half.data();  // in place
        args.count = odd;
        args.dtype = DataType::kFloat16;
        args.op = ReduceOp::kMax;
        runCollective(comm, args, "shm");
        if (half != want_odd) throw std::runtime_error("wrong in-place float16 max");
      });
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

}  // namespace
}  // namespace perseus::collectives
