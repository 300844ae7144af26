// Binding a rank to its share of the cores (Note [Binding ranks to cores]): in forked children,
// so the test process keeps its mask. Expectations follow the cores this machine lends.
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "support/forked_ranks.h"
#include "transport/shm/cpu_budget.h"

namespace perseus::transport::shm {
namespace {

using namespace std::chrono_literals;
using perseus::testing::runForked;

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
        // Bound ranks own their cores: spinning through is right, as when unbound with enough
        // cores.
        else if (sharedCpus(n) != static_cast<int>(per) * n || oversubscribed(n))
          code = 14;
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
        if (sharedCpus(static_cast<int>(all.size()) + 1) != static_cast<int>(all.size())) return 13;
        if (!oversubscribed(static_cast<int>(all.size()) + 1)) return 14;
        return 0;
      },
      20s);
  EXPECT_TRUE(st[0].ok()) << st[0].describe();
}

}  // namespace
}  // namespace perseus::transport::shm
