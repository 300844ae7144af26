// One tensor name submitted on different process sets by different ranks: every rank fails
// with a MismatchError naming the tensor and the sets (set_conflict.h), within seconds, and
// the engines stay usable. Legitimate reuse of a name across sets still works.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>

#include "support/engine_ranks.h"

namespace perseus::engine {
namespace {

using testing::EngineRanks;
using testing::engineTestParams;

TensorArg arg(const void* data, std::vector<int64_t> shape) {
  return TensorArg{data, DataType::kFloat32, std::move(shape), -1};
}

StatusCode waitStatus(const std::shared_ptr<Handle>& h) {
  if (!h->wait(20.0)) throw std::runtime_error("handle '" + h->name() + "' did not complete");
  return h->status();
}

void expectOk(const std::shared_ptr<Handle>& h) {
  if (waitStatus(h) != StatusCode::kOk) throw std::runtime_error(h->name() + ": " + h->message());
}

TEST(EngineProcessSetMismatch, SameNameOnDifferentSetsFailsEveryRank) {
  Params params = engineTestParams();
  params.stall_warning_s = 60;  // the error must come from the check, not the stall inspector
  EngineRanks ranks(3, params);
  ranks.run([&](int r, Engine& e) {
    auto add = e.addProcessSet({0, 1});
    expectOk(add);
    const int32_t pair = r < 2 ? add->intResult() : Engine::kGlobalSet;
    std::vector<float> buf(2, 1.0f);
    // Rank 1 uses the pair, ranks 0 and 2 the global set.
    const auto start = std::chrono::steady_clock::now();
    auto h = e.allreduce("mix", {arg(buf.data(), {2})}, {buf.data()}, ReduceOp::kSum, 1, 1,
                         r == 1 ? pair : Engine::kGlobalSet);
    EXPECT_EQ(waitStatus(h), StatusCode::kMismatch) << h->message();
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
              10.0);
    EXPECT_NE(h->message().find("'mix'"), std::string::npos) << h->message();
    EXPECT_NE(h->message().find("process set " + std::to_string(add->intResult())),
              std::string::npos)
        << h->message();
    EXPECT_NE(h->message().find("process set 0"), std::string::npos) << h->message();

    // Still usable, the name included, on either set.
    std::vector<float> ok(2, 1.0f);
    expectOk(e.allreduce("mix", {arg(ok.data(), {2})}, {ok.data()}, ReduceOp::kSum));
    EXPECT_FLOAT_EQ(ok[0], 3.0f);
    if (r < 2) {
      expectOk(e.allreduce("mix", {arg(ok.data(), {2})}, {ok.data()}, ReduceOp::kSum, 1, 1, pair));
      EXPECT_FLOAT_EQ(ok[0], 6.0f);
    }
    expectOk(e.barrier());
  });
}

// A name negotiated on one set before (a cache hit there, which the check is not told about)
// and submitted on another set by one rank: the cached request stalls, its bit is invalidated,
// it is reported like a new one, and the conflict fails every rank after PERSEUS_STALL_WARNING
// instead of stalling on. Both with a user set and the global set as the cached one.
TEST(EngineProcessSetMismatch, ANameCachedOnOneSetAndNewOnAnotherFailsAfterTheStallWarning) {
  Params params = engineTestParams();
  params.stall_warning_s = 0.5;
  EngineRanks ranks(2, params);
  ranks.run([&](int r, Engine& e) {
    auto add_a = e.addProcessSet({0, 1});
    expectOk(add_a);
    auto add_b = e.addProcessSet({0, 1});
    expectOk(add_b);
    const int32_t a = add_a->intResult(), b = add_b->intResult();
    for (int32_t cached_on : {a, Engine::kGlobalSet}) {
      const std::string name = "cached." + std::to_string(cached_on);
      std::vector<float> buf(2, 1.0f);
      for (int k = 0; k < 3; ++k) {
        expectOk(e.allreduce(name, {arg(buf.data(), {2})}, {buf.data()}, ReduceOp::kSum, 1, 1,
                             cached_on));
      }
      const auto start = std::chrono::steady_clock::now();
      auto h = e.allreduce(name, {arg(buf.data(), {2})}, {buf.data()}, ReduceOp::kSum, 1, 1,
                           r == 1 ? b : cached_on);
      EXPECT_EQ(waitStatus(h), StatusCode::kMismatch) << h->message();
      EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                10.0);
      EXPECT_NE(h->message().find("'" + name + "'"), std::string::npos) << h->message();
      EXPECT_NE(h->message().find("process set " + std::to_string(b)), std::string::npos)
          << h->message();
      std::vector<float> ok(2, 1.0f);
      expectOk(
          e.allreduce(name, {arg(ok.data(), {2})}, {ok.data()}, ReduceOp::kSum, 1, 1, cached_on));
      EXPECT_FLOAT_EQ(ok[0], 2.0f);
    }
    expectOk(e.barrier());
  });
}

// The conflict is found before one member of the sets has submitted the name (a slow rank):
// that rank's later submission fails at once with the same error instead of waiting for ranks
// that have moved on.
TEST(EngineProcessSetMismatch, ALateMemberFailsTheConflictedNameToo) {
  Params params = engineTestParams();
  params.stall_warning_s = 60;
  EngineRanks ranks(3, params);
  std::atomic<int> failed{0};
  ranks.run([&](int r, Engine& e) {
    auto add = e.addProcessSet({0, 1});
    expectOk(add);
    const int32_t pair = r < 2 ? add->intResult() : Engine::kGlobalSet;
    std::vector<float> buf(2, 1.0f);
    if (r == 2) {  // submits only after ranks 0 and 1 have their error
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (failed.load() < 2 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      ASSERT_EQ(failed.load(), 2);
    }
    const auto start = std::chrono::steady_clock::now();
    auto h = e.allreduce("late", {arg(buf.data(), {2})}, {buf.data()}, ReduceOp::kSum, 1, 1,
                         r == 1 ? pair : Engine::kGlobalSet);
    EXPECT_EQ(waitStatus(h), StatusCode::kMismatch) << h->message();
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
              10.0);
    EXPECT_NE(h->message().find("'late'"), std::string::npos) << h->message();
    failed.fetch_add(1);

    // The name works afterwards, for every rank.
    std::vector<float> ok(2, 1.0f);
    expectOk(e.allreduce("late", {arg(ok.data(), {2})}, {ok.data()}, ReduceOp::kSum));
    EXPECT_FLOAT_EQ(ok[0], 3.0f);
    expectOk(e.barrier());
  });
}

TEST(EngineProcessSetMismatch, SameNameOnDisjointSetsAndInTurnIsFine) {
  EngineRanks ranks(4, engineTestParams());
  ranks.run([&](int r, Engine& e) {
    auto a = e.addProcessSet({0, 1});
    expectOk(a);
    auto b = e.addProcessSet({2, 3});
    expectOk(b);
    const int32_t mine = r < 2 ? a->intResult() : b->intResult();
    for (int i = 0; i < 3; ++i) {
      std::vector<float> v(3, 1.0f);
      expectOk(e.allreduce("g", {arg(v.data(), {3})}, {v.data()}, ReduceOp::kSum, 1, 1, mine));
      EXPECT_FLOAT_EQ(v[0], 2.0f);
      expectOk(e.allreduce("g", {arg(v.data(), {3})}, {v.data()}, ReduceOp::kSum));
      EXPECT_FLOAT_EQ(v[0], 8.0f);
    }
  });
}

}  // namespace
}  // namespace perseus::engine
