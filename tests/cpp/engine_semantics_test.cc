// Engine behaviour beyond data movement: mismatches, duplicate names, process sets, join,
// stall inspection, shutdown and the timeline. Ranks as threads with their own engines.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "support/engine_ranks.h"

namespace perseus::engine {
namespace {

using testing::EngineRanks;
using testing::engineTestParams;

void expectOk(const std::shared_ptr<Handle>& h) {
  if (!h->wait(20.0)) throw std::runtime_error("handle '" + h->name() + "' did not complete");
  if (h->status() != StatusCode::kOk) throw std::runtime_error(h->name() + ": " + h->message());
}

StatusCode waitStatus(const std::shared_ptr<Handle>& h) {
  if (!h->wait(20.0)) throw std::runtime_error("handle '" + h->name() + "' did not complete");
  return h->status();
}

TensorArg arg(const void* data, std::vector<int64_t> shape, DataType t = DataType::kFloat32) {
  return TensorArg{data, t, std::move(shape), -1};
}

TEST(EngineSemantics, MismatchesFailEveryRankAndTheEngineStaysUsable) {
  EngineRanks ranks(3, engineTestParams());
  ranks.run([&](int r, Engine& e) {
    std::vector<float> buf(8, 1.0f);
    std::vector<double> dbuf(8, 1.0);
    // shape
    auto h =
        e.allreduce("shape", {arg(buf.data(), {r == 1 ? 8 : 4})}, {buf.data()}, ReduceOp::kSum);
    EXPECT_EQ(waitStatus(h), StatusCode::kMismatch);
    EXPECT_NE(h->message().find("'shape'"), std::string::npos) << h->message();
    EXPECT_NE(h->message().find("set rank 1"), std::string::npos) << h->message();
    // dtype
    h = r == 2 ? e.allreduce("dtype", {arg(dbuf.data(), {4}, DataType::kFloat64)}, {dbuf.data()},
                             ReduceOp::kSum)
               : e.allreduce("dtype", {arg(buf.data(), {4})}, {buf.data()}, ReduceOp::kSum);
    EXPECT_EQ(waitStatus(h), StatusCode::kMismatch);
    EXPECT_NE(h->message().find("data types"), std::string::npos) << h->message();
    // op
    h = r == 0 ? e.allgather("op", {arg(buf.data(), {4})})
               : e.allreduce("op", {arg(buf.data(), {4})}, {buf.data()}, ReduceOp::kSum);
    EXPECT_EQ(waitStatus(h), StatusCode::kMismatch);
    // reduce op
    h = e.allreduce("rop", {arg(buf.data(), {4})}, {buf.data()},
                    r == 0 ? ReduceOp::kMax : ReduceOp::kSum);
    EXPECT_EQ(waitStatus(h), StatusCode::kMismatch);
    // root
    h = e.broadcast("root", arg(buf.data(), {4}), buf.data(), r == 2 ? 1 : 0);
    EXPECT_EQ(waitStatus(h), StatusCode::kMismatch);
    EXPECT_NE(h->message().find("root"), std::string::npos);
    // Cached metadata that changes on one rank only is renegotiated and reported too.
    for (int i = 0; i < 2; ++i)
      expectOk(e.allreduce("later", {arg(buf.data(), {4})}, {buf.data()}, ReduceOp::kMin));
    h = e.allreduce("later", {arg(buf.data(), {r == 0 ? 2 : 4})}, {buf.data()}, ReduceOp::kMin);
    EXPECT_EQ(waitStatus(h), StatusCode::kMismatch);
    // Still usable.
    std::vector<float> ok(4, 2.0f);
    expectOk(e.allreduce("after", {arg(ok.data(), {4})}, {ok.data()}, ReduceOp::kSum));
    EXPECT_FLOAT_EQ(ok[0], 6.0f);
  });
}

TEST(EngineSemantics, DuplicateNameInFlightIsRejectedAtSubmission) {
  EngineRanks ranks(2, engineTestParams());
  ranks.run([&](int r, Engine& e) {
    std::vector<float> a(4, 1.0f), b(4, 1.0f);
    std::shared_ptr<Handle> first;
    if (r == 0) {
      first = e.allreduce("dup", {arg(a.data(), {4})}, {a.data()}, ReduceOp::kSum);
      EXPECT_THROW(e.allreduce("dup", {arg(b.data(), {4})}, {b.data()}, ReduceOp::kSum),
                   DuplicateNameError);
      expectOk(e.barrier());  // rank 1 submits only after this check
    } else {
      expectOk(e.barrier());
      first = e.allreduce("dup", {arg(a.data(), {4})}, {a.data()}, ReduceOp::kSum);
    }
    expectOk(first);
    // Once complete, the name is free again.
    expectOk(e.allreduce("dup", {arg(b.data(), {4})}, {b.data()}, ReduceOp::kSum));
  });
}

TEST(EngineSemantics, ValidationErrorsAreImmediate) {
  EngineRanks ranks(2, engineTestParams());
  Engine& e = ranks.engine(0);
  std::vector<float> a(4);
  EXPECT_THROW(e.allreduce("", {arg(a.data(), {4})}, {a.data()}, ReduceOp::kSum),
               InvalidArgumentError);
  EXPECT_THROW(e.broadcast("b", arg(a.data(), {4}), a.data(), 2), InvalidArgumentError);
  EXPECT_THROW(e.allgather("s", {arg(a.data(), {})}), InvalidArgumentError);
  EXPECT_THROW(e.alltoall("a", arg(a.data(), {3}), {}), InvalidArgumentError);
  EXPECT_THROW(e.alltoall("a", arg(a.data(), {4}), {1, 2}), InvalidArgumentError);
  EXPECT_THROW(e.allreduce("x", {arg(a.data(), {4})}, {a.data()}, ReduceOp::kSum, 1, 1, 7),
               InvalidArgumentError);
  TensorArg gpu = arg(a.data(), {4});
  gpu.device = 0;
  EXPECT_THROW(e.allreduce("g", {gpu}, {a.data()}, ReduceOp::kSum), UnsupportedError);
}

TEST(EngineSemantics, ProcessSetsAddUseRemove) {
  EngineRanks ranks(4, engineTestParams());
  ranks.run([&](int r, Engine& e) {
    auto h = e.addProcessSet({0, 2});
    expectOk(h);
    const int32_t even = h->intResult();
    EXPECT_GE(even, 1);
    auto h2 = e.addProcessSet({3, 1});
    expectOk(h2);
    const int32_t odd = h2->intResult();
    EXPECT_NE(odd, even);
    auto info = e.processSet(odd);
    ASSERT_TRUE(info.has_value());
    EXPECT_EQ(info->members, (std::vector<int>{1, 3}));
    EXPECT_EQ(info->rank, r == 1 ? 0 : (r == 3 ? 1 : -1));
    const int32_t mine = r % 2 == 0 ? even : odd;
    for (int iter = 0; iter < 3; ++iter) {
      // The same name in two sets at once is fine.
      std::vector<int32_t> v(3, r);
      expectOk(e.allreduce("grad", {arg(v.data(), {3}, DataType::kInt32)}, {v.data()},
                           ReduceOp::kSum, 1, 1, mine));
      EXPECT_EQ(v[0], r % 2 == 0 ? 2 : 4);
      std::vector<float> g(2, 1.0f);
      expectOk(e.allreduce("global", {arg(g.data(), {2})}, {g.data()}, ReduceOp::kSum));
      EXPECT_FLOAT_EQ(g[1], 4.0f);
    }
    std::vector<float> x(2);
    EXPECT_THROW(e.allreduce("foreign", {arg(x.data(), {2})}, {x.data()}, ReduceOp::kSum, 1, 1,
                             r % 2 == 0 ? odd : even),
                 InvalidArgumentError);
    expectOk(e.barrier(mine));
    // LOCAL and CROSS exist from the start (one host: LOCAL is everyone, CROSS is oneself).
    std::vector<float> l(1, 1.0f);
    expectOk(e.allreduce("local", {arg(l.data(), {1})}, {l.data()}, ReduceOp::kSum, 1, 1,
                         Engine::kLocalSet));
    EXPECT_FLOAT_EQ(l[0], 4.0f);
    expectOk(e.allreduce("cross", {arg(l.data(), {1})}, {l.data()}, ReduceOp::kSum, 1, 1,
                         Engine::kCrossSet));
    EXPECT_FLOAT_EQ(l[0], 4.0f);
    expectOk(e.removeProcessSet(even));
    EXPECT_FALSE(e.processSet(even).has_value());
    EXPECT_THROW(e.barrier(even), InvalidArgumentError);
    // Mismatched membership lists are an error on every rank.
    auto bad = e.addProcessSet(r == 0 ? std::vector<int>{0, 1} : std::vector<int>{0, 2});
    EXPECT_EQ(waitStatus(bad), StatusCode::kMismatch);
  });
}

// Group ids run out after 61 sets; removed sets' ids are then handed to new sets whose members
// differ, and whose arena history (barrier counts, small-message lines) differs by member:
// every kind of shared-memory step must still line up (Note [Reused group ids]).
TEST(EngineSemantics, RemovedProcessSetsMakeRoomForNewOnes) {
  const std::vector<std::vector<int>> member_lists = {{0, 1}, {1, 2, 3},    {0, 2, 3}, {2, 3},
                                                      {0, 3}, {0, 1, 2, 3}, {1, 3}};
  EngineRanks ranks(4, engineTestParams());
  ranks.run([&](int r, Engine& e) {
    for (int i = 0; i < 75; ++i) {  // 61 fresh ids, then reused ones
      const std::vector<int>& members = member_lists[static_cast<size_t>(i) % member_lists.size()];
      auto added = e.addProcessSet(members);
      expectOk(added);
      const int32_t set = added->intResult();
      const bool member = std::find(members.begin(), members.end(), r) != members.end();
      const int n = static_cast<int>(members.size());
      for (int round = 0; member && round <= i % 3; ++round) {
        std::vector<int32_t> tiny(3, r);  // one-barrier path: the group's lines
        expectOk(e.allreduce("tiny", {arg(tiny.data(), {3}, DataType::kInt32)}, {tiny.data()},
                             ReduceOp::kSum, 1, 1, set));
        int32_t sum = 0;
        for (int m : members) sum += m;
        EXPECT_EQ(tiny[2], sum) << "set " << set << " at step " << i;
        std::vector<float> small(1000, 1.0f);  // two barriers
        expectOk(e.allreduce("small", {arg(small.data(), {1000})}, {small.data()}, ReduceOp::kSum,
                             1, 1, set));
        EXPECT_FLOAT_EQ(small[999], static_cast<float>(n));
        expectOk(e.barrier(set));
      }
      expectOk(e.removeProcessSet(set));
    }
    // At most 61 sets at once; removing one makes room again.
    std::vector<int32_t> sets;
    for (int i = 0; i < 61; ++i) {
      auto added = e.addProcessSet({0, 1});
      expectOk(added);
      sets.push_back(added->intResult());
    }
    auto refused = e.addProcessSet({0, 1});
    ASSERT_EQ(waitStatus(refused), StatusCode::kInvalidArgument);
    EXPECT_NE(refused->message().find("remove one"), std::string::npos) << refused->message();
    expectOk(e.removeProcessSet(sets[7]));
    auto again = e.addProcessSet({2, 3, 1});
    expectOk(again);
    std::vector<float> v(5, 1.0f);
    if (r != 0) {
      expectOk(e.allreduce("after", {arg(v.data(), {5})}, {v.data()}, ReduceOp::kSum, 1, 1,
                           again->intResult()));
      EXPECT_FLOAT_EQ(v[4], 3.0f);
    }
  });
}

TEST(EngineSemantics, JoinContributesZerosAndReportsTheLastRank) {
  EngineRanks ranks(3, engineTestParams());
  ranks.run([&](int r, Engine& e) {
    // Rank 2 trains fewer steps; its missing allreduces count as zeros.
    const int steps = r == 2 ? 1 : 3;
    for (int s = 0; s < steps; ++s) {
      std::vector<float> v(5, 1.0f);
      expectOk(e.allreduce("step", {arg(v.data(), {5})}, {v.data()}, ReduceOp::kSum));
      EXPECT_FLOAT_EQ(v[4], s == 0 ? 3.0f : 2.0f) << "rank " << r << " step " << s;
    }
    if (r != 2) {
      // Rank 2 has joined: it contributes no rows to allgather and receives broadcasts.
      std::vector<float> g(static_cast<size_t>(r + 1), static_cast<float>(r + 1));
      auto h = e.allgather("gather_after_join", {arg(g.data(), {r + 1})});
      expectOk(h);
      const float* got = static_cast<const float*>(h->outputs()[0].ptr());
      EXPECT_EQ(h->outputs()[0].shape, std::vector<int64_t>{3});
      EXPECT_FLOAT_EQ(got[0], 1.0f);
      EXPECT_FLOAT_EQ(got[2], 2.0f);
      std::vector<float> b(2, static_cast<float>(r));
      expectOk(e.broadcast("bcast_after_join", arg(b.data(), {2}), b.data(), 1));
      EXPECT_FLOAT_EQ(b[0], 1.0f);
      // Alltoall cannot run while rank 2 has joined (Horovod's text leads the message).
      std::vector<float> a(3, 1.0f);
      auto t = e.alltoall("alltoall_after_join", arg(a.data(), {3}), {});
      if (waitStatus(t) != StatusCode::kUnsupported) throw std::runtime_error(t->message());
      EXPECT_NE(t->message().find("Alltoall is not supported with Join"), std::string::npos)
          << t->message();
    }
    auto j = e.join();
    expectOk(j);
    EXPECT_EQ(j->intResult(), r == 2 ? j->intResult() : j->intResult());
    int last = j->intResult();
    EXPECT_TRUE(last == 0 || last == 1) << last;
    // Everyone works normally afterwards.
    std::vector<float> v(2, 1.0f);
    expectOk(e.allreduce("after_join", {arg(v.data(), {2})}, {v.data()}, ReduceOp::kSum));
    EXPECT_FLOAT_EQ(v[0], 3.0f);
  });
}

TEST(EngineSemantics, StallWarningNamesTensorAndMissingRanks) {
  Params p = engineTestParams();
  p.stall_warning_s = 0.2;
  EngineRanks ranks(3, p);
  ranks.run([&](int r, Engine& e) {
    std::vector<float> v(2, 1.0f);
    if (r != 1) {
      auto h = e.allreduce("lonely", {arg(v.data(), {2})}, {v.data()}, ReduceOp::kSum);
      std::this_thread::sleep_for(std::chrono::milliseconds(800));
      if (r == 0) {
        std::string w = e.lastStallWarning();
        EXPECT_NE(w.find("'lonely'"), std::string::npos) << w;
        EXPECT_NE(w.find("missing set ranks [1]"), std::string::npos) << w;
      }
      expectOk(e.barrier());
      expectOk(h);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(800));
      expectOk(e.barrier());
      expectOk(e.allreduce("lonely", {arg(v.data(), {2})}, {v.data()}, ReduceOp::kSum));
    }
    EXPECT_FLOAT_EQ(v[0], 3.0f);
  });
}

TEST(EngineSemantics, StallShutdownFailsThePendingOps) {
  Params p = engineTestParams();
  p.stall_warning_s = 0.1;
  p.stall_shutdown_s = 0.3;
  EngineRanks ranks(2, p);
  ranks.run([&](int r, Engine& e) {
    std::vector<float> v(2, 1.0f);
    if (r == 0) {
      auto h = e.allreduce("never", {arg(v.data(), {2})}, {v.data()}, ReduceOp::kSum);
      EXPECT_EQ(waitStatus(h), StatusCode::kTimeout);
      EXPECT_NE(h->message().find("PERSEUS_STALL_SHUTDOWN"), std::string::npos) << h->message();
    }
    // Both engines stop: later requests fail at once.
    for (int i = 0; i < 200 && e.running(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    auto later = e.allreduce("later", {arg(v.data(), {2})}, {v.data()}, ReduceOp::kSum);
    EXPECT_EQ(waitStatus(later), StatusCode::kTimeout);
  });
}

TEST(EngineSemantics, ShutdownOnOneRankStopsAllAndFailsPending) {
  EngineRanks ranks(2, engineTestParams());
  std::vector<float> v(2, 1.0f);
  auto pending =
      ranks.engine(1).allreduce("pending", {arg(v.data(), {2})}, {v.data()}, ReduceOp::kSum);
  ranks.engine(0).shutdown();
  EXPECT_EQ(waitStatus(pending), StatusCode::kShutDown);
  EXPECT_NE(pending->message().find("'pending'"), std::string::npos) << pending->message();
  auto later = ranks.engine(1).barrier();
  EXPECT_EQ(waitStatus(later), StatusCode::kShutDown);
}

TEST(EngineSemantics, TimelineIsValidJsonWithPhases) {
  Params p = engineTestParams();
  std::string path = ::testing::TempDir() + "perseus_timeline_test.json";
  p.timeline = path;
  {
    EngineRanks ranks(2, p);
    ranks.run([&](int r, Engine& e) {
      for (int i = 0; i < 3; ++i) {
        std::vector<float> a(4, 1.0f), b(4, 1.0f), c(4, 1.0f);
        // Grouped, so that the fusion phases appear whatever cycle "tl.b" lands in.
        auto h1 = e.allreduce("tl.a", {arg(a.data(), {4}), arg(c.data(), {4})},
                              {a.data(), c.data()}, ReduceOp::kSum, 2.0);
        auto h2 = e.allreduce("tl.b", {arg(b.data(), {4})}, {b.data()}, ReduceOp::kSum, 2.0);
        expectOk(h1);
        expectOk(h2);
      }
    });
    // Valid before shutdown too (flushed per cycle).
    std::ifstream f(Timeline::pathForRank(path, 1, 2));
    std::stringstream ss;
    ss << f.rdbuf();
    std::string text = ss.str();
    ASSERT_GE(text.size(), 4u);
    EXPECT_EQ(text.front(), '[');
    EXPECT_EQ(text.back(), ']');
  }
  std::ifstream f(Timeline::pathForRank(path, 0, 2));
  std::stringstream ss;
  ss << f.rdbuf();
  std::string text = ss.str();
  for (const char* phase :
       {"NEGOTIATE", "QUEUE", "MEMCPY_IN_FUSION", "COMMUNICATE", "MEMCPY_OUT", "tl.a"}) {
    EXPECT_NE(text.find(phase), std::string::npos) << phase;
  }
  EXPECT_EQ(text.back(), ']');
  // Cheap structural check: balanced braces and no trailing comma before the bracket.
  int depth = 0;
  for (char c : text) depth += c == '{' ? 1 : c == '}' ? -1 : 0;
  EXPECT_EQ(depth, 0);
  EXPECT_EQ(text.find(",\n]"), std::string::npos);
  if (std::system(("python3 -c 'import json,sys; json.load(open(sys.argv[1]))' " +
                   path.substr(0, path.size() - 5) + ".0.json")
                      .c_str()) != 0) {
    ADD_FAILURE() << "python json.load rejected the timeline";
  }
}

TEST(EngineSemantics, TimelineStartsAndStopsAtRunTime) {
  // Horovod's start_timeline/stop_timeline, armed by DYNAMIC (no file until started).
  Params p = engineTestParams();
  p.timeline = "DYNAMIC";
  const std::string path = ::testing::TempDir() + "perseus_dynamic_timeline.json";
  EngineRanks ranks(2, p);
  ranks.run([&](int r, Engine& e) {
    std::vector<float> a(4, 1.0f);
    expectOk(e.allreduce("dyn.before", {arg(a.data(), {4})}, {a.data()}, ReduceOp::kSum));
    e.startTimeline(path, /*mark_cycles=*/true);
    expectOk(e.allreduce("dyn.during", {arg(a.data(), {4})}, {a.data()}, ReduceOp::kSum));
    e.stopTimeline();
    expectOk(e.allreduce("dyn.after", {arg(a.data(), {4})}, {a.data()}, ReduceOp::kSum));
    std::ifstream f(Timeline::pathForRank(path, r, 2));
    std::stringstream ss;
    ss << f.rdbuf();
    const std::string text = ss.str();
    EXPECT_NE(text.find("dyn.during"), std::string::npos) << text;
    EXPECT_NE(text.find("CYCLE"), std::string::npos);
    EXPECT_EQ(text.find("dyn.before"), std::string::npos);
    EXPECT_EQ(text.find("dyn.after"), std::string::npos);
    EXPECT_EQ(text.back(), ']');
    EXPECT_THROW(e.startTimeline("/nonexistent-dir/t.json", false), InvalidArgumentError);
  });
}

}  // namespace
}  // namespace perseus::engine
