// ShmArena with ranks as threads: slots, group barriers, abort, timeout, closed members.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "common/status.h"
#include "support/shared_barrier.h"
#include "support/shm_groups.h"

namespace perseus::transport {
namespace {

using namespace std::chrono_literals;
using perseus::testing::createShmGroupsAsThreads;
using perseus::testing::shmTestParams;
using perseus::testing::uniqueJobId;

void runRanks(int n, const std::function<void(int)>& body) {
  std::exception_ptr error;
  std::mutex mutex;
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!error) error = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);
}

TEST(ShmArena, DescribesTheHost) {
  auto groups = createShmGroupsAsThreads(3, uniqueJobId("desc"), shmTestParams());
  ShmArena& a = *groups[2]->arena;
  EXPECT_EQ(a.localRank(), 2);
  EXPECT_EQ(a.localSize(), 3);
  EXPECT_EQ(a.globalRanks(), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(a.slotBytes(), static_cast<size_t>(shmTestParams().shm_slot_bytes));
  // Every rank sees the same memory behind slot(i).
  static_cast<char*>(groups[0]->arena->slot(1))[5] = 'x';
  EXPECT_EQ(static_cast<char*>(a.slot(1))[5], 'x');
  EXPECT_NE(a.slot(0), a.slot(1));
  EXPECT_THROW(a.slot(3), InvalidArgumentError);
}

TEST(ShmArena, OverlappingGroupsKeepSeparateBarriers) {
  const int n = 3;
  auto groups = createShmGroupsAsThreads(n, uniqueJobId("groups"), shmTestParams());
  std::atomic<int> counter{0};
  runRanks(n, [&](int r) {
    ShmArena& a = *groups[r]->arena;
    for (int round = 0; round < 300; ++round) {
      a.barrier(0, {0, 1, 2});
      if (r != 1) a.barrier(7, {0, 2});  // rank 1 is not in group 7
      static_cast<int*>(a.slot(r))[0] = round;
      a.barrier(0, {0, 1, 2});
      for (int p = 0; p < n; ++p) {
        ASSERT_EQ(static_cast<int*>(a.slot(p))[0], round) << "rank " << r << " reads rank " << p;
      }
    }
    counter += 1;
  });
  EXPECT_EQ(counter.load(), n);
}

TEST(ShmArena, BarrierMaxGivesEveryMemberTheLargestValue) {
  const int n = 3;
  auto groups = createShmGroupsAsThreads(n, uniqueJobId("max"), shmTestParams());
  runRanks(n, [&](int r) {
    ShmArena& a = *groups[r]->arena;
    for (uint64_t round = 0; round < 500; ++round) {
      // The largest value moves between ranks; plain barriers in between share the counters.
      const uint64_t mine = round * 10 + static_cast<uint64_t>((r + round) % n);
      ASSERT_EQ(a.barrierMax(3, {0, 1, 2}, mine), round * 10 + n - 1) << "rank " << r;
      if (round % 3 == 0) a.barrier(3, {0, 1, 2});
      if (r != 1) {
        ASSERT_EQ(a.barrierMax(5, {0, 2}, round + r), round + 2);
      }
    }
  });
}

TEST(ShmArena, BadBarrierArgumentsAreRejected) {
  auto groups = createShmGroupsAsThreads(2, uniqueJobId("badargs"), shmTestParams());
  ShmArena& a = *groups[0]->arena;
  EXPECT_THROW(a.barrier(-1, {0, 1}), InvalidArgumentError);
  EXPECT_THROW(a.barrier(ShmArena::kMaxGroups, {0, 1}), InvalidArgumentError);
  EXPECT_THROW(a.barrier(0, {1}), InvalidArgumentError);     // without this rank
  EXPECT_THROW(a.barrier(0, {1, 0}), InvalidArgumentError);  // unsorted
  EXPECT_THROW(a.barrier(0, {0, 0}), InvalidArgumentError);  // repeated
  EXPECT_THROW(a.barrier(0, {0, 2}), InvalidArgumentError);  // out of range
  a.barrier(0, {0});                                         // alone: returns at once
}

TEST(ShmArena, AbortInterruptsABarrier) {
  auto groups = createShmGroupsAsThreads(2, uniqueJobId("aabort"), shmTestParams());
  ShmArena& a = *groups[0]->arena;
  std::thread aborter([&] {
    std::this_thread::sleep_for(50ms);
    a.abort("stop the barrier");
  });
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(a.barrier(0, {0, 1}), ShutDownError);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  aborter.join();
  EXPECT_THROW(a.barrier(0, {0, 1}), ShutDownError);
}

TEST(ShmArena, MissingMemberTimesOut) {
  Params params = shmTestParams();
  params.timeout_s = 0.2;
  auto groups = createShmGroupsAsThreads(3, uniqueJobId("atimeout"), params);
  const auto start = std::chrono::steady_clock::now();
  try {
    groups[0]->arena->barrier(1, {0, 2});
    ADD_FAILURE() << "expected TimeoutError";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 2"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
}

TEST(ShmArena, ClosedMemberIsLost) {
  auto groups = createShmGroupsAsThreads(2, uniqueJobId("aclosed"), shmTestParams());
  std::thread closer([&] {
    std::this_thread::sleep_for(50ms);
    groups[1].reset();
  });
  try {
    groups[0]->arena->barrier(0, {0, 1});
    ADD_FAILURE() << "expected PeerLostError";
  } catch (const PeerLostError& e) {
    EXPECT_EQ(e.rank(), 1);
  }
  closer.join();
}

}  // namespace
}  // namespace perseus::transport
