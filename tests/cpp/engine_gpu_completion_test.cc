// GpuCompletion (engine/exec/gpu_completion.h) on any machine. The GPU works are test doubles that
// report what a real GpuWork would (done, a local CUDA error, a lost peer): the completion
// rules are what is tested here; tests/cpp/gpu_*_test.cc run the real works on a GPU.
#include <gtest/gtest.h>

#include "engine/exec/gpu_completion.h"

namespace perseus::engine {
namespace {

class ScriptedWork : public backends::GpuWork {
 public:
  bool done = false;
  std::exception_ptr error;  // thrown by poll() while set
  bool poll() override {
    if (error) std::rethrow_exception(error);
    return done;
  }
  void wait() override {}
  void streamWait(void*) override {}
  std::string nonFiniteTensor() override { return ""; }
};

struct Fixture {
  GpuCompletion completion;
  std::vector<std::string> breaks;
  GpuCompletion::BreakEngine onBreak() {
    return [this](const Error& e, const std::string& during) {
      breaks.push_back(during + ": " + e.what());
    };
  }
  std::shared_ptr<Handle> add(const std::string& name, std::vector<std::shared_ptr<ScriptedWork>> w,
                              StatusCode code = StatusCode::kOk, std::string message = "") {
    auto h = Handle::create(name);
    completion.add(h, {w.begin(), w.end()}, code, std::move(message), {});
    return h;
  }
};

TEST(GpuCompletion, AHandleCompletesWhenAllItsWorkIsDone) {
  Fixture f;
  auto a = std::make_shared<ScriptedWork>(), b = std::make_shared<ScriptedWork>();
  auto h = f.add("t", {a, b});
  f.completion.poll(nullptr, f.onBreak());
  EXPECT_FALSE(h->done());
  a->done = true;
  f.completion.poll(nullptr, f.onBreak());
  EXPECT_FALSE(h->done());
  b->done = true;
  f.completion.poll(nullptr, f.onBreak());
  ASSERT_TRUE(h->done());
  EXPECT_EQ(h->status(), StatusCode::kOk);
  EXPECT_TRUE(f.completion.empty());
  EXPECT_TRUE(f.breaks.empty());
}

TEST(GpuCompletion, TheEntrysOwnErrorIsReportedOnceTheWorkIsDone) {
  Fixture f;
  auto w = std::make_shared<ScriptedWork>();
  auto h = f.add("t", {w}, StatusCode::kInvalidArgument, "bad dtype");
  f.completion.poll(nullptr, f.onBreak());
  ASSERT_TRUE(h->done());  // an error needs no wait for the device
  EXPECT_EQ(h->status(), StatusCode::kInvalidArgument);
  EXPECT_EQ(h->message(), "bad dtype");
}

TEST(GpuCompletion, ALocalCudaErrorFailsThatHandleOnly) {
  Fixture f;
  auto bad = std::make_shared<ScriptedWork>(), good = std::make_shared<ScriptedWork>();
  bad->error = std::make_exception_ptr(InternalError("cudaErrorIllegalAddress"));
  auto hb = f.add("bad", {bad});
  auto hg = f.add("good", {good});
  f.completion.poll(nullptr, f.onBreak());
  ASSERT_TRUE(hb->done());
  EXPECT_EQ(hb->status(), StatusCode::kInternal);
  EXPECT_NE(hb->message().find("'bad': cudaErrorIllegalAddress"), std::string::npos)
      << hb->message();
  EXPECT_FALSE(hg->done());
  EXPECT_TRUE(f.breaks.empty());
}

TEST(GpuCompletion, ALostPeerBreaksTheEngineAndFailAllFailsTheRest) {
  Fixture f;
  auto lost = std::make_shared<ScriptedWork>(), other = std::make_shared<ScriptedWork>();
  lost->error = std::make_exception_ptr(PeerLostError(1, "rank 1 exited"));
  auto hl = f.add("grad.0", {lost});
  auto ho = f.add("grad.1", {other});
  f.completion.poll(nullptr, f.onBreak());
  ASSERT_EQ(f.breaks.size(), 1u);
  EXPECT_NE(f.breaks[0].find("GPU collective 'grad.0'"), std::string::npos) << f.breaks[0];
  EXPECT_NE(f.breaks[0].find("rank 1 exited"), std::string::npos) << f.breaks[0];
  EXPECT_FALSE(hl->done());  // the engine's stop fails it, with the stop's message
  f.completion.failAll(StatusCode::kPeerLost, "rank 1 exited (during GPU collective 'grad.0')");
  for (const auto& h : {hl, ho}) {
    ASSERT_TRUE(h->done());
    EXPECT_EQ(h->status(), StatusCode::kPeerLost);
    EXPECT_NE(h->message().find("' failed: rank 1 exited"), std::string::npos) << h->message();
  }
  EXPECT_TRUE(f.completion.empty());
}

}  // namespace
}  // namespace perseus::engine
