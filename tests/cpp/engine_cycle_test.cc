// The Cycle on its own (cycle.h): ranks as threads of one process on the in-process transport,
// each running its cycles itself. No Engine, no engine thread, no Driver.
#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/cycle/cycle.h"
#include "engine/posted/posted_collectives.h"
#include "support/inproc_world.h"

namespace perseus::engine {
namespace {

using testing::InProcWorld;
using testing::InProcWorldOptions;

// Records each fusion group's size, then runs it on the CPU executor.
class RecordingExecutor : public Executor {
 public:
  explicit RecordingExecutor(std::vector<size_t>* group_sizes)
      : group_sizes_(group_sizes), cpu_(makeCpuExecutor()) {}
  void run(const FusionGroup& group, const std::vector<Response>& responses,
           const std::vector<Entry*>& entries, collectives::Communicator& comm,
           FusionBuffer& buffer, Timeline* timeline) override {
    group_sizes_->push_back(group.items.size());
    cpu_->run(group, responses, entries, comm, buffer, timeline);
  }

 private:
  std::vector<size_t>* group_sizes_;
  std::unique_ptr<Executor> cpu_;
};

// One rank: its cycle and the parts the cycle works on.
class Rank {
 public:
  Rank(InProcWorld& world, int rank)
      : posted_(nullptr, world.transport(rank), world.params(), {}), sets_added_(0) {
    Cycle::Parts p;
    p.topology.rank = rank;
    p.topology.size = world.size();
    p.transport = world.transport(rank);
    p.arena = world.arena(rank);
    p.params = world.params();
    p.submissions = &submissions_;
    p.fast_path = &posted_;
    p.gpu_completion = &gpu_completion_;
    p.cpu_executor = std::make_unique<RecordingExecutor>(&group_sizes_);
    Cycle::Listener listener;
    listener.set_added = [this](const ProcessSetInfo&) { ++sets_added_; };
    cycle_ = std::make_unique<Cycle>(std::move(p), std::move(listener));
  }

  std::shared_ptr<Handle> allreduce(const std::string& name, std::vector<float>* data) {
    auto e = std::make_unique<Entry>();
    e->request.op = OpType::kAllreduce;
    e->request.reduce_op = ReduceOp::kSum;
    e->request.name = name;
    e->request.process_set = kGlobalSetId;
    e->request.tensors.push_back({DataType::kFloat32, {static_cast<int64_t>(data->size())}});
    e->inputs.push_back(data->data());
    e->outputs.push_back(data->data());
    e->submitted = std::chrono::steady_clock::now();
    e->handle = Handle::create(name);
    std::shared_ptr<Handle> handle = e->handle;
    Submissions::Stop stop;
    if (submissions_.submit(e, true, &stop) != Submissions::Admission::kQueued) {
      throw std::runtime_error("'" + name + "' was not queued");
    }
    return handle;
  }

  // Runs cycles until every handle is done; returns how many it took. A response runs on
  // every rank in the same cycle, so the ranks stop after the same number.
  int cyclesUntilDone(const std::vector<std::shared_ptr<Handle>>& handles) {
    for (int n = 1; n <= 50; ++n) {
      cycle_->drain();
      cycle_->run(false);
      bool done = true;
      for (const auto& h : handles) done = done && h->done();
      if (done) return n;
    }
    throw std::runtime_error("handles not done after 50 cycles");
  }

  Cycle& cycle() { return *cycle_; }
  const std::vector<size_t>& groupSizes() const { return group_sizes_; }
  int setsAdded() const { return sets_added_; }

 private:
  Submissions submissions_;
  PostedCollectives posted_;
  GpuCompletion gpu_completion_;
  std::vector<size_t> group_sizes_;
  int sets_added_;
  std::unique_ptr<Cycle> cycle_;
};

void expectOk(const Handle& h) {
  ASSERT_TRUE(h.done()) << h.name();
  EXPECT_EQ(h.status(), StatusCode::kOk) << h.name() << ": " << h.message();
}

InProcWorldOptions worldOptions() {
  InProcWorldOptions o;
  o.size = 3;
  return o;
}

TEST(EngineCycle, AllreduceInOneCycle) {
  InProcWorld world(worldOptions());
  world.runOk([&](int r) {
    Rank rank(world, r);
    EXPECT_EQ(rank.setsAdded(), 3);  // global, local, cross
    std::vector<float> x(1000, static_cast<float>(r + 1));
    auto h = rank.allreduce("x", &x);
    EXPECT_EQ(rank.cyclesUntilDone({h}), 1);
    expectOk(*h);
    EXPECT_EQ(x[0], 6.0f);
    EXPECT_EQ(x[999], 6.0f);
    // The same name again: a cache hit, still one cycle.
    std::fill(x.begin(), x.end(), 1.0f);
    h = rank.allreduce("x", &x);
    EXPECT_EQ(rank.cyclesUntilDone({h}), 1);
    expectOk(*h);
    EXPECT_EQ(x[500], 3.0f);
    const Cycle::Stats s = rank.cycle().stats();
    EXPECT_EQ(s.cycles, 2u);
    EXPECT_EQ(s.cached_responses, 1u);
    EXPECT_EQ(s.coordinated_responses, 1u);
  });
}

TEST(EngineCycle, TensorsNegotiatedTogetherRunAsOneFusedGroup) {
  InProcWorld world(worldOptions());
  world.runOk([&](int r) {
    Rank rank(world, r);
    std::vector<float> a(16, 1.0f), b(40, static_cast<float>(r)), c(3, 2.0f);
    auto ha = rank.allreduce("a", &a);
    auto hb = rank.allreduce("b", &b);
    auto hc = rank.allreduce("c", &c);
    EXPECT_EQ(rank.cyclesUntilDone({ha, hb, hc}), 1);
    expectOk(*ha);
    expectOk(*hb);
    expectOk(*hc);
    EXPECT_EQ(rank.groupSizes(), std::vector<size_t>{3});
    EXPECT_EQ(a[15], 3.0f);
    EXPECT_EQ(b[39], 3.0f);  // 0 + 1 + 2
    EXPECT_EQ(c[2], 6.0f);
  });
}

TEST(EngineCycle, AMismatchFailsOnEveryRankAndTheNextCycleRuns) {
  InProcWorld world(worldOptions());
  world.runOk([&](int r) {
    Rank rank(world, r);
    std::vector<float> bad(r == 1 ? 8 : 4, 1.0f);
    auto h = rank.allreduce("bad", &bad);
    EXPECT_EQ(rank.cyclesUntilDone({h}), 1);
    EXPECT_EQ(h->status(), StatusCode::kMismatch);
    EXPECT_NE(h->message().find("'bad'"), std::string::npos) << h->message();
    EXPECT_TRUE(rank.groupSizes().empty());  // nothing ran
    EXPECT_FALSE(rank.cycle().stopped());
    std::vector<float> good(4, 1.0f);
    auto g = rank.allreduce("good", &good);
    EXPECT_EQ(rank.cyclesUntilDone({g}), 1);
    expectOk(*g);
    EXPECT_EQ(good[3], 3.0f);
  });
}

TEST(EngineCycle, AShutdownCycleStopsEveryRankAndFailsWhatIsPending) {
  InProcWorld world(worldOptions());
  world.runOk([&](int r) {
    Rank rank(world, r);
    // Only rank 0 submits: the others never would, so it waits until the stop fails it.
    std::vector<float> x(4, 1.0f);
    std::shared_ptr<Handle> h = r == 0 ? rank.allreduce("alone", &x) : nullptr;
    rank.cycle().drain();
    rank.cycle().run(r == 2);  // one rank asks; every rank stops in that cycle
    EXPECT_TRUE(rank.cycle().stopped());
    if (h) {
      ASSERT_TRUE(h->done());
      EXPECT_EQ(h->status(), StatusCode::kShutDown);
      EXPECT_NE(h->message().find("'alone'"), std::string::npos) << h->message();
    }
  });
}

}  // namespace
}  // namespace perseus::engine
