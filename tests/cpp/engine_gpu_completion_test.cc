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
  const void* stream = nullptr;
  uint64_t order = 0;  // 0: no stream orders it
  int polls = 0;
  bool poll() override {
    ++polls;
    if (error) std::rethrow_exception(error);
    return done;
  }
  void wait() override {}
  void streamWait(void*) override {}
  std::string nonFiniteTensor() override { return ""; }
  bool completionStream(const void** s, uint64_t* o) const override {
    *s = stream;
    *o = order;
    return order != 0;
  }
};

std::shared_ptr<ScriptedWork> onStream(const void* stream, uint64_t order) {
  auto w = std::make_shared<ScriptedWork>();
  w->stream = stream;
  w->order = order;
  return w;
}

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
    h->setGpuWork({w.begin(), w.end()});
    completion.add(h, code, std::move(message), {});
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

// Note [GPU completion by stream]: once the newest work on a stream is done, the older ones on
// it are done without being asked; works of another stream, or recorded later, are asked.
TEST(GpuCompletion, AStreamsNewestDoneWorkRetiresItsOlderOnesWithoutAQuery) {
  Fixture f;
  int s1 = 0, s2 = 0;
  std::vector<std::shared_ptr<ScriptedWork>> works = {onStream(&s1, 1), onStream(&s1, 3),
                                                      onStream(&s2, 2), onStream(&s1, 4)};
  std::vector<std::shared_ptr<Handle>> handles;
  for (size_t i = 0; i < works.size(); ++i)
    handles.push_back(f.add("t" + std::to_string(i), {works[i]}));
  std::vector<std::string> order;
  for (auto& h : handles) {
    h->setCallback([&order, name = std::string(h->name())](StatusCode, const std::string&) {
      order.push_back(name);
    });
  }
  works[0]->done = works[1]->done = works[2]->done = true;  // s1's newest (order 4) still runs
  f.completion.poll(nullptr, f.onBreak());
  EXPECT_EQ(order, (std::vector<std::string>{"t0", "t1", "t2"}));  // in the order added
  EXPECT_EQ(works[0]->polls, 0);  // order 3 on s1 was done: order 1 is
  EXPECT_EQ(works[1]->polls, 1);
  EXPECT_EQ(works[2]->polls, 1);  // s2: asked
  EXPECT_EQ(works[3]->polls, 1);
  EXPECT_FALSE(handles[3]->done());
  works[3]->done = true;
  f.completion.poll(nullptr, f.onBreak());
  EXPECT_TRUE(handles[3]->done());
  EXPECT_TRUE(f.completion.empty());
}

TEST(GpuCompletion, AnOlderWorkAddedLaterIsRetiredByItsRecordOrderNotItsPlace) {
  // Completion order follows the record order on the stream, which may differ from the order
  // the engine hands works over: a work recorded later than a done one is still asked.
  Fixture f;
  int s = 0;
  auto later = onStream(&s, 9), earlier = onStream(&s, 5), unordered = onStream(&s, 0);
  auto h_later = f.add("later", {later});
  auto h_earlier = f.add("earlier", {earlier});
  auto h_unordered = f.add("unordered", {unordered});
  earlier->done = true;
  f.completion.poll(nullptr, f.onBreak());
  EXPECT_TRUE(h_earlier->done());
  EXPECT_FALSE(h_later->done());  // recorded after the done one: asked, and not done
  EXPECT_EQ(later->polls, 1);
  EXPECT_FALSE(h_unordered->done());  // no stream orders it: asked itself
  EXPECT_EQ(unordered->polls, 1);
}

}  // namespace
}  // namespace perseus::engine
