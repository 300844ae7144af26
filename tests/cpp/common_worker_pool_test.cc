// WorkerPool: every part runs exactly once, errors reach the caller, concurrent callers take
// turns, shutdown() restarts cleanly, and a forked child gets a working pool of its own.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "common/worker_pool.h"

namespace perseus {
namespace {

constexpr int64_t kSpinUs = 50;

// Runs `parts` parts that each add 1 to their counter; true if each counter is exactly 1.
bool eachPartOnce(int parts) {
  std::vector<std::atomic<int>> hits(parts);
  auto body = [&](int part) { hits[part].fetch_add(1, std::memory_order_relaxed); };
  WorkerPool::instance().run(parts, body, kSpinUs);
  for (auto& h : hits) {
    if (h.load() != 1) return false;
  }
  return true;
}

TEST(WorkerPool, EveryPartRunsOnce) {
  for (int parts : {1, 2, 3, 5, 2, 4}) EXPECT_TRUE(eachPartOnce(parts)) << parts << " parts";
  EXPECT_GE(WorkerPool::instance().workers(), 4);
  // Beyond kMaxThreads the caller runs the rest.
  EXPECT_TRUE(eachPartOnce(WorkerPool::kMaxThreads + 3));
  int zero_calls = 0;
  auto none = [&](int) { ++zero_calls; };
  WorkerPool::instance().run(0, none, kSpinUs);
  EXPECT_EQ(zero_calls, 0);
}

TEST(WorkerPool, ManyBackToBackRunsAfterSleeping) {
  // Long gaps let the workers fall asleep; the wake-up path must still deliver every job.
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(eachPartOnce(3));
    if (i % 5 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (int i = 0; i < 2000; ++i) ASSERT_TRUE(eachPartOnce(2 + i % 3));
}

TEST(WorkerPool, ThrowingPartIsRethrownAfterAllFinish) {
  std::atomic<int> finished{0};
  auto body = [&](int part) {
    if (part == 2) throw std::runtime_error("part 2 failed");
    finished.fetch_add(1);
  };
  EXPECT_THROW(WorkerPool::instance().run(4, body, kSpinUs), std::runtime_error);
  EXPECT_EQ(finished.load(), 3);
  auto caller_throws = [&](int part) {
    if (part == 0) throw std::invalid_argument("part 0 failed");
  };
  EXPECT_THROW(WorkerPool::instance().run(3, caller_throws, kSpinUs), std::invalid_argument);
  EXPECT_TRUE(eachPartOnce(4));  // the pool is still usable
}

TEST(WorkerPool, ConcurrentCallersTakeTurns) {
  std::atomic<int> bad{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 3; ++c) {
    callers.emplace_back([&, c] {
      for (int i = 0; i < 300; ++i) {
        if (!eachPartOnce(2 + (c + i) % 3)) bad.fetch_add(1);
      }
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST(WorkerPool, ShutdownJoinsAndALaterRunRestarts) {
  ASSERT_TRUE(eachPartOnce(3));
  WorkerPool::instance().shutdown();
  EXPECT_EQ(WorkerPool::instance().workers(), 0);
  EXPECT_TRUE(eachPartOnce(3));
  EXPECT_EQ(WorkerPool::instance().workers(), 2);
}

TEST(WorkerPool, ForkedChildHasItsOwnWorkers) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "ThreadSanitizer does not support starting threads after a multi-threaded fork";
#endif
  ASSERT_TRUE(eachPartOnce(3));  // the parent has workers the child will not have
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    alarm(20);  // a hang in the child ends it (and fails the test) instead of blocking
    bool ok = WorkerPool::instance().workers() == 0 && eachPartOnce(3) && eachPartOnce(4);
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  EXPECT_TRUE(eachPartOnce(3));
}

}  // namespace
}  // namespace perseus
