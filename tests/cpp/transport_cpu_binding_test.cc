// Binding a rank to its share of the cores, and what the host's ranks make of each other's masks
// (Note [Binding ranks to cores]): in forked children, so the test process keeps its mask.
// Expectations follow the cores this machine lends.
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "support/forked_ranks.h"
#include "support/shared_barrier.h"
#include "support/shm_groups.h"
#include "transport/shm/cpu_budget.h"
#include "transport/shm/shm_local_group.h"

namespace perseus::transport::shm {
namespace {

using namespace std::chrono_literals;
using perseus::testing::runForked;
using perseus::testing::SharedBarrier;
using perseus::testing::shmTestParams;
using perseus::testing::uniqueJobId;

std::vector<int> maskOf(pthread_t thread) {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (pthread_getaffinity_np(thread, sizeof(set), &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

TEST(CpuBinding, EachLocalRankGetsItsOwnBlockAndThreadsStartedBeforeFollow) {
  const std::vector<int> all = maskOf(pthread_self());
  const int n = static_cast<int>(all.size()) >= 2 ? 2 : 1;
  if (n < 2) GTEST_SKIP() << "one usable core: nothing to split (needs >= 2)";
  auto st = runForked(
      n,
      [&](int rank) {
        std::atomic<bool> stop{false};
        std::thread earlier([&] {  // a framework's pool, started before init
          while (!stop.load()) std::this_thread::sleep_for(1ms);
        });
        const std::vector<int> share = bindToShare(rank, n);
        const size_t per = all.size() / static_cast<size_t>(n);
        const std::vector<int> ordered = coreOrder(all);
        std::vector<int> expected(ordered.begin() + static_cast<std::ptrdiff_t>(per * rank),
                                  ordered.begin() + static_cast<std::ptrdiff_t>(per * (rank + 1)));
        std::sort(expected.begin(), expected.end());  // as a mask lists them
        int code = 0;
        if (share != expected)
          code = 10;
        else if (maskOf(pthread_self()) != expected)
          code = 11;
        else if (maskOf(earlier.native_handle()) != expected)
          code = 12;
        else if (usableCpus() != static_cast<int>(per))
          code = 13;
        stop = true;
        earlier.join();
        return code;
      },
      20s);
  for (int r = 0; r < n; ++r) EXPECT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].describe();
}

// Hyperthread siblings numbered 4 apart (cpu i and i + 4 share core i % 4), two packages of two
// cores: blocks of whole cores, package by package.
CpuPlace fakeTwoPackagesWithSmt(int cpu) { return CpuPlace{(cpu % 4) / 2, 0, cpu % 4}; }

TEST(CpuBinding, CoreOrderKeepsSiblingsAndPackagesTogether) {
  const std::vector<int> all = {0, 1, 2, 3, 4, 5, 6, 7};
  EXPECT_EQ(coreOrder(all, fakeTwoPackagesWithSmt), (std::vector<int>{0, 4, 1, 5, 2, 6, 3, 7}));
  // A restricted mask keeps its CPUs, ordered the same way.
  EXPECT_EQ(coreOrder({7, 2, 6, 3}, fakeTwoPackagesWithSmt), (std::vector<int>{2, 6, 3, 7}));
  // This machine: a permutation of its CPUs.
  std::vector<int> mine = maskOf(pthread_self());
  std::vector<int> ordered = coreOrder(mine);
  std::sort(ordered.begin(), ordered.end());
  EXPECT_EQ(ordered, mine);
}

TEST(CpuBinding, MoreRanksThanCoresOrOneRankStayUnbound) {
  const std::vector<int> all = maskOf(pthread_self());
  auto st = runForked(
      1,
      [&](int) {
        if (!bindToShare(0, static_cast<int>(all.size()) + 1).empty()) return 10;
        if (!bindToShare(0, 1).empty()) return 11;
        if (maskOf(pthread_self()) != all) return 12;
        return 0;
      },
      20s);
  EXPECT_TRUE(st[0].ok()) << st[0].describe();
}

TEST(CpuBinding, RanksOversubscribeOnlyWhenTheyCannotEachHaveACpu) {
  // Unbound: every rank sees the host's mask.
  EXPECT_FALSE(hostCpus({{0, 1, 2, 3}, {0, 1, 2, 3}}).oversubscribed);
  EXPECT_EQ(hostCpus({{0, 1, 2, 3}, {0, 1, 2, 3}}).cpus, 4);
  EXPECT_TRUE(hostCpus({{0, 1}, {0, 1}, {0, 1}}).oversubscribed);
  // Bound to a core each, by perseusrun or from outside (mpirun, srun --cpu-bind, taskset).
  EXPECT_FALSE(hostCpus({{0}, {1}}).oversubscribed);
  EXPECT_EQ(hostCpus({{0}, {1}}).cpus, 2);
  EXPECT_FALSE(hostCpus({{0, 4}, {1, 5}}).oversubscribed);  // a core and its sibling each
  // Bound to one CPU together.
  EXPECT_TRUE(hostCpus({{0}, {0}}).oversubscribed);
  EXPECT_EQ(hostCpus({{0}, {0}}).cpus, 1);
  EXPECT_TRUE(hostCpus({{2}, {0, 1}, {2}}).oversubscribed);
  // Enough CPUs in all, but three ranks share two of them.
  EXPECT_TRUE(hostCpus({{0, 1}, {0, 1}, {0, 1}, {2, 3}}).oversubscribed);
  // Overlapping masks that still leave a CPU each, whichever rank comes first.
  EXPECT_FALSE(hostCpus({{0}, {0, 1}}).oversubscribed);
  EXPECT_FALSE(hostCpus({{0, 1}, {0}}).oversubscribed);
  EXPECT_FALSE(hostCpus({{0, 1}, {1, 2}, {0}}).oversubscribed);
  EXPECT_FALSE(hostCpus({{5}}).oversubscribed);
  // A mask that could not be read counts as the others' CPUs.
  EXPECT_FALSE(hostCpus({{}, {0, 1}}).oversubscribed);
  EXPECT_TRUE(hostCpus({{}, {0}}).oversubscribed);
  EXPECT_TRUE(hostCpus({{}, {}}).oversubscribed);
  EXPECT_EQ(hostCpus({{}, {}}).cpus, 1);
}

// Two processes that bind themselves before they connect, as a launcher would bind them:
// whether their waiters yield follows both masks, not each one's own.
void expectDecision(const std::vector<int>& cpu_of_rank, bool oversubscribed) {
  const int n = static_cast<int>(cpu_of_rank.size());
  const std::string job = uniqueJobId("cpus");
  SharedBarrier barrier(n);
  const Params params = shmTestParams();
  auto st = runForked(
      n,
      [&](int rank) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu_of_rank[rank], &set);
        if (sched_setaffinity(0, sizeof(set), &set) != 0) return 10;
        auto group = createShmLocalGroup(job, rank, {0, 1}, params, [&] { barrier.wait(); });
        if (group->doorbell->oversubscribed() != oversubscribed) return 11;
        const int distinct = cpu_of_rank[0] == cpu_of_rank[1] ? 1 : 2;
        if (group->arena->hostCpus() != distinct) return 12;
        return 0;
      },
      20s);
  for (int r = 0; r < n; ++r) EXPECT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].describe();
}

TEST(CpuBinding, RanksBoundApartSpinAndRanksBoundTogetherYield) {
  const std::vector<int> all = maskOf(pthread_self());
  if (all.size() < 2) GTEST_SKIP() << "one usable core: nothing to bind apart (needs >= 2)";
  expectDecision({all[0], all[1]}, false);
  expectDecision({all[0], all[0]}, true);
}

}  // namespace
}  // namespace perseus::transport::shm
