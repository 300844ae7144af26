// Note [Caller-run cycles]: waiting threads run the engine's cycles themselves, next to the
// engine thread and to ranks whose callers do not wait. Ranks as threads, each with its own
// engine; these run under ThreadSanitizer too.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>

#include "support/engine_ranks.h"

namespace perseus::engine {
namespace {

using testing::EngineRanks;
using testing::engineTestParams;

TensorArg arg(const void* data, int64_t n) { return TensorArg{data, DataType::kFloat32, {n}, -1}; }

void waitOk(Engine& e, const std::shared_ptr<Handle>& h) {
  if (!e.waitFor(*h, 20.0, e.params().spin_us)) {
    throw std::runtime_error("'" + h->name() + "' did not complete");
  }
  if (h->status() != StatusCode::kOk) throw std::runtime_error(h->name() + ": " + h->message());
}

// Spins on done() (a poll), pausing `pause` between calls (zero: a yield), for at most 20 s.
void pollUntilDone(const std::function<bool()>& done, std::chrono::microseconds pause) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) throw std::runtime_error("no progress");
    if (pause.count() > 0) {
      std::this_thread::sleep_for(pause);
    } else {
      std::this_thread::yield();
    }
  }
}

// Synchronous calls driven by their callers, while a second thread per rank submits other
// tensors and blocks on their handles (the engine thread, or a driver, runs those).
TEST(EngineCallerCycles, DriversAndTheEngineThreadShareTheCycles) {
  EngineRanks ranks(3, engineTestParams());
  ranks.run([&](int r, Engine& e) {
    std::thread side([&] {
      std::vector<float> v(1000);
      for (int i = 0; i < 60; ++i) {
        std::fill(v.begin(), v.end(), static_cast<float>(r + i));
        auto h = e.allreduce("side", {arg(v.data(), 1000)}, {v.data()}, ReduceOp::kSum);
        if (!h->wait(20.0) || h->status() != StatusCode::kOk) {
          throw std::runtime_error("side: " + h->message());
        }
        if (v[999] != static_cast<float>(3 + 3 * i)) throw std::runtime_error("side: wrong sum");
      }
    });
    std::vector<float> x(5);
    for (int i = 0; i < 300; ++i) {
      std::fill(x.begin(), x.end(), static_cast<float>(r));
      auto h = e.allreduce("sync." + std::to_string(i % 7), {arg(x.data(), 5)}, {x.data()},
                           ReduceOp::kSum);
      waitOk(e, h);
      ASSERT_EQ(x[4], 3.0f) << "call " << i;
    }
    side.join();
  });
}

// A mismatch found in a cycle that a caller runs fails every rank, and the engine goes on.
TEST(EngineCallerCycles, ErrorsInADrivenCycleReachEveryRank) {
  EngineRanks ranks(2, engineTestParams());
  ranks.run([&](int r, Engine& e) {
    std::vector<float> x(8, 1.0f);
    auto h = e.allreduce("bad", {arg(x.data(), r == 0 ? 4 : 8)}, {x.data()}, ReduceOp::kSum);
    ASSERT_TRUE(e.waitFor(*h, 20.0, e.params().spin_us));
    EXPECT_EQ(h->status(), StatusCode::kMismatch);
    EXPECT_NE(h->message().find("'bad'"), std::string::npos) << h->message();
    waitOk(e, e.allreduce("good", {arg(x.data(), 8)}, {x.data()}, ReduceOp::kSum));
    EXPECT_EQ(x[7], 2.0f);
  });
}

// Rank 0 waits right away; rank 1 submits, then leaves the handle alone for a while and only
// polls it: rank 1's engine thread (parked while its caller drove, listening after the
// window) must take part in the cycles without any waiter on rank 1.
TEST(EngineCallerCycles, ARankWhoseCallerDoesNotWaitStillAnswers) {
  EngineRanks ranks(2, engineTestParams());
  ranks.run([&](int r, Engine& e) {
    std::vector<float> x(4);
    for (int round = 0; round < 20; ++round) {
      std::fill(x.begin(), x.end(), 1.0f);
      auto h = e.allreduce("t", {arg(x.data(), 4)}, {x.data()}, ReduceOp::kSum);
      if (r == 0 || round % 2 == 0) {
        waitOk(e, h);
      } else {
        pollUntilDone([&] { return h->done(); }, std::chrono::microseconds(300));
        ASSERT_EQ(h->status(), StatusCode::kOk) << h->message();
      }
      ASSERT_EQ(x[3], 2.0f) << "round " << round;
    }
  });
}

// After waits that drove, handles that are only polled complete too: polling hands the cycles
// back to the engine thread (a busy poller would otherwise keep the core from it).
TEST(EngineCallerCycles, PolledHandlesCompleteAfterDrivenWaits) {
  EngineRanks ranks(2, engineTestParams());
  ranks.run([&](int r, Engine& e) {
    std::vector<float> x(4);
    for (int round = 0; round < 50; ++round) {
      std::fill(x.begin(), x.end(), 1.0f);
      auto h = e.allreduce("p", {arg(x.data(), 4)}, {x.data()}, ReduceOp::kSum);
      if (round % 2 == 0) {
        waitOk(e, h);
      } else {
        pollUntilDone([&] { return e.poll(*h); }, std::chrono::microseconds(0));
        ASSERT_EQ(h->status(), StatusCode::kOk) << h->message();
      }
      ASSERT_EQ(x[3], 2.0f) << "round " << round;
    }
  });
}

// A wait with a zero timeout is a poll, and a timed wait that cannot finish returns false.
TEST(EngineCallerCycles, PollsAndTimeoutsDoNotBlock) {
  EngineRanks ranks(2, engineTestParams());
  ranks.run([&](int r, Engine& e) {
    std::vector<float> x(4, 1.0f);
    if (r == 0) {
      auto h = e.allreduce("late", {arg(x.data(), 4)}, {x.data()}, ReduceOp::kSum);
      EXPECT_FALSE(e.waitFor(*h, 0.0, e.params().spin_us));
      EXPECT_FALSE(e.waitFor(*h, 0.05, e.params().spin_us));  // rank 1 has not submitted yet
      waitOk(e, e.allreduce("go", {arg(x.data(), 1)}, {x.data()}, ReduceOp::kSum));
      waitOk(e, h);
    } else {
      std::vector<float> y(1, 1.0f);
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      waitOk(e, e.allreduce("go", {arg(y.data(), 1)}, {y.data()}, ReduceOp::kSum));
      waitOk(e, e.allreduce("late", {arg(x.data(), 4)}, {x.data()}, ReduceOp::kSum));
    }
    EXPECT_EQ(x[3], 2.0f);
  });
}

}  // namespace
}  // namespace perseus::engine
