// Binding a rank to its share of the cores (Note [Binding ranks to cores]): in forked children,
// so the test process keeps its mask. Expectations follow the cores this machine lends.
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

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
  auto st = runForked(n, [&](int rank) {
    std::atomic<bool> stop{false};
    std::thread earlier([&] {  // a framework's pool, started before init
      while (!stop.load()) std::this_thread::sleep_for(1ms);
    });
    const std::vector<int> share = bindToShare(rank, n);
    const size_t per = all.size() / static_cast<size_t>(n);
    const std::vector<int> expected(all.begin() + static_cast<std::ptrdiff_t>(per * rank),
                                    all.begin() + static_cast<std::ptrdiff_t>(per * (rank + 1)));
    int code = 0;
    if (share != expected) code = 10;
    else if (maskOf(pthread_self()) != expected) code = 11;
    else if (maskOf(earlier.native_handle()) != expected) code = 12;
    else if (usableCpus() != static_cast<int>(per)) code = 13;
    // Bound ranks own their cores: spinning through is right, as when unbound with enough cores.
    else if (sharedCpus(n) != static_cast<int>(per) * n || oversubscribed(n)) code = 14;
    stop = true;
    earlier.join();
    return code;
  }, 20s);
  for (int r = 0; r < n; ++r) EXPECT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].describe();
}

TEST(CpuBinding, MoreRanksThanCoresOrOneRankStayUnbound) {
  const std::vector<int> all = maskOf(pthread_self());
  auto st = runForked(1, [&](int) {
    if (!bindToShare(0, static_cast<int>(all.size()) + 1).empty()) return 10;
    if (!bindToShare(0, 1).empty()) return 11;
    if (maskOf(pthread_self()) != all) return 12;
    if (sharedCpus(static_cast<int>(all.size()) + 1) != static_cast<int>(all.size())) return 13;
    if (!oversubscribed(static_cast<int>(all.size()) + 1)) return 14;
    return 0;
  }, 20s);
  EXPECT_TRUE(st[0].ok()) << st[0].describe();
}

}  // namespace
}  // namespace perseus::transport::shm
