// Coordinator negotiation as pure functions: no network, no engine thread.
#include <gtest/gtest.h>

#include <cstdio>

#include "engine/stall_report.h"
#include "negotiation/coordinator.h"
#include "negotiation/wire.h"

namespace perseus::engine {
namespace {

Request allreduce(const std::string& name, std::vector<int64_t> shape,
                  DataType dtype = DataType::kFloat32) {
  Request q;
  q.op = OpType::kAllreduce;
  q.name = name;
  q.tensors.push_back({dtype, std::move(shape)});
  return q;
}

const auto kNow = Coordinator::Clock::now();

TEST(EngineNegotiation, CompleteOnlyWhenEveryRankAsked) {
  Coordinator c(3);
  c.add(0, {allreduce("a", {4})}, kNow);
  c.add(1, {allreduce("a", {4})}, kNow);
  c.add(2, {}, kNow);
  EXPECT_TRUE(c.takeReady().empty());
  EXPECT_EQ(c.numWaiting(), 1u);
  c.add(0, {}, kNow);
  c.add(1, {}, kNow);
  c.add(2, {allreduce("a", {4})}, kNow);
  auto rs = c.takeReady();
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_FALSE(rs[0].is_error);
  EXPECT_EQ(rs[0].name, "a");
  EXPECT_EQ(c.numWaiting(), 0u);
}

TEST(EngineNegotiation, DeterministicOrderWhateverTheSubmissionOrder) {
  Coordinator c(2);
  c.add(0, {allreduce("x", {1}), allreduce("y", {1}), allreduce("z", {1})}, kNow);
  c.add(1, {allreduce("z", {1}), allreduce("y", {1}), allreduce("x", {1})}, kNow);
  auto rs = c.takeReady();
  ASSERT_EQ(rs.size(), 3u);
  EXPECT_EQ(rs[0].name, "x");
  EXPECT_EQ(rs[1].name, "y");
  EXPECT_EQ(rs[2].name, "z");
}

TEST(EngineNegotiation, ShapeMismatchNamesTensorOpAndRanks) {
  Coordinator c(3);
  c.add(0, {allreduce("grad", {4})}, kNow);
  c.add(1, {allreduce("grad", {8})}, kNow);
  c.add(2, {allreduce("grad", {4})}, kNow);
  auto rs = c.takeReady();
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_TRUE(rs[0].is_error);
  EXPECT_EQ(rs[0].error_code, StatusCode::kMismatch);
  EXPECT_NE(rs[0].error_message.find("'grad'"), std::string::npos) << rs[0].error_message;
  EXPECT_NE(rs[0].error_message.find("ALLREDUCE"), std::string::npos);
  EXPECT_NE(rs[0].error_message.find("set rank 1 [8]"), std::string::npos) << rs[0].error_message;
}

TEST(EngineNegotiation, EachKindOfMismatch) {
  struct Case {
    const char* what;
    std::function<void(Request&)> change;
  };
  std::vector<Case> cases = {
      {"data types", [](Request& q) { q.tensors[0].dtype = DataType::kInt32; }},
      {"operations", [](Request& q) { q.op = OpType::kAllgather; }},
      {"reduction operations", [](Request& q) { q.reduce_op = ReduceOp::kMax; }},
      {"prescale/postscale", [](Request& q) { q.postscale = 0.5; }},
      {"tensor counts", [](Request& q) { q.tensors.push_back(q.tensors[0]); }},
  };
  for (const Case& k : cases) {
    Coordinator c(2);
    Request other = allreduce("t", {2, 3});
    k.change(other);
    c.add(0, {allreduce("t", {2, 3})}, kNow);
    c.add(1, {other}, kNow);
    auto rs = c.takeReady();
    ASSERT_EQ(rs.size(), 1u);
    EXPECT_TRUE(rs[0].is_error) << k.what;
    EXPECT_NE(rs[0].error_message.find(k.what), std::string::npos) << rs[0].error_message;
  }
}

TEST(EngineNegotiation, BroadcastRootMismatch) {
  Coordinator c(2);
  Request a = allreduce("b", {3});
  a.op = OpType::kBroadcast;
  Request b = a;
  b.root = 1;
  c.add(0, {a}, kNow);
  c.add(1, {b}, kNow);
  auto rs = c.takeReady();
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_NE(rs[0].error_message.find("root ranks"), std::string::npos);
}

TEST(EngineNegotiation, AllgatherMayDifferInFirstDimension) {
  Coordinator c(2);
  Request a = allreduce("g", {2, 5});
  a.op = OpType::kAllgather;
  Request b = a;
  b.tensors[0].shape = {7, 5};
  c.add(0, {a}, kNow);
  c.add(1, {b}, kNow);
  auto rs = c.takeReady();
  ASSERT_EQ(rs.size(), 1u);
  ASSERT_FALSE(rs[0].is_error) << rs[0].error_message;
  EXPECT_EQ(rs[0].first_dims, (std::vector<int64_t>{2, 7}));

  Request d = a;
  d.tensors[0].shape = {2, 6};
  c.add(0, {a}, kNow);
  c.add(1, {d}, kNow);
  rs = c.takeReady();
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_TRUE(rs[0].is_error);
}

TEST(EngineNegotiation, JoinedRanksCountForAllreduceAllgatherAndBroadcast) {
  Coordinator c(3);
  Request join;
  join.op = OpType::kJoin;
  join.name = "__join";
  c.add(0, {allreduce("a", {2})}, kNow);
  c.add(1, {join}, kNow);
  c.add(2, {allreduce("a", {2})}, kNow);
  auto rs = c.takeReady();
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_FALSE(rs[0].is_error);

  // Allgather: the joined rank contributes no rows.
  Request g = allreduce("g", {2});
  g.op = OpType::kAllgather;
  c.add(0, {g}, kNow);
  c.add(1, {}, kNow);
  c.add(2, {g}, kNow);
  rs = c.takeReady();
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_FALSE(rs[0].is_error) << rs[0].error_message;
  EXPECT_EQ(rs[0].first_dims, (std::vector<int64_t>{2, 0, 2}));

  // Broadcast: runs from a root that has not joined, refused from a joined one.
  Request b = allreduce("b", {2});
  b.op = OpType::kBroadcast;
  b.root = 0;
  Request b1 = b;
  b1.name = "b1";
  b1.root = 1;
  c.add(0, {b, b1}, kNow);
  c.add(1, {}, kNow);
  c.add(2, {b, b1}, kNow);
  rs = c.takeReady();
  ASSERT_EQ(rs.size(), 2u);
  EXPECT_FALSE(rs[0].is_error) << rs[0].error_message;
  EXPECT_TRUE(rs[1].is_error);
  EXPECT_NE(rs[1].error_message.find("has joined"), std::string::npos) << rs[1].error_message;

  // Alltoall and reducescatter are refused with Horovod's text.
  Request a = allreduce("a2a", {3});
  a.op = OpType::kAlltoall;
  c.add(0, {a}, kNow);
  c.add(1, {}, kNow);
  c.add(2, {a}, kNow);
  rs = c.takeReady();
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_TRUE(rs[0].is_error);
  EXPECT_EQ(rs[0].error_code, StatusCode::kUnsupported);
  EXPECT_EQ(rs[0].error_message.rfind("Alltoall is not supported with Join at this time.", 0), 0u)
      << rs[0].error_message;

  c.add(0, {join}, kNow);
  c.add(1, {}, kNow);
  c.add(2, {join}, kNow);
  rs = c.takeReady();
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_EQ(rs[0].op, OpType::kJoin);
  EXPECT_EQ(rs[0].last_joined_rank, 2);
  EXPECT_EQ(c.numJoined(), 0);
}

TEST(EngineNegotiation, StallsNameMissingRanksAndCanFail) {
  Coordinator c(3);
  c.add(0, {allreduce("slow", {1})}, kNow);
  c.add(1, {}, kNow);
  c.add(2, {allreduce("slow", {1})}, kNow);
  EXPECT_TRUE(c.stalls(kNow, 1.0).empty());
  auto later = kNow + std::chrono::seconds(5);
  auto stalls = c.stalls(later, 1.0);
  ASSERT_EQ(stalls.size(), 1u);
  EXPECT_EQ(stalls[0].name, "slow");
  EXPECT_EQ(stalls[0].missing_ranks, std::vector<int>{1});
  auto failed = c.failStalled(later, 1.0, StatusCode::kTimeout, "stop");
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_TRUE(failed[0].is_error);
  EXPECT_EQ(c.numWaiting(), 0u);
}

// PERSEUS_STALL_DIAGNOSIS: a stall counts from the earliest submission (a cached request that
// reaches the coordinator late says how long it waited), each is diagnosed once, and the
// diagnosis carries what the line shows.
TEST(EngineNegotiation, StallsCountFromTheSubmissionAndAreDiagnosedOnce) {
  Coordinator c(3);
  Request late = allreduce("late", {2, 3});
  late.waited_s = 2.5;  // re-sent by a cache hit that had waited that long
  c.add(0, {late}, kNow);
  c.add(1, {}, kNow);
  c.add(2, {allreduce("late", {2, 3})}, kNow);
  auto stalls = c.takeUndiagnosed(kNow, 2.0, 4);
  ASSERT_EQ(stalls.size(), 1u);
  EXPECT_NEAR(stalls[0].waited_s, 2.5, 1e-6);
  EXPECT_EQ(stalls[0].missing_ranks, std::vector<int>{1});
  ASSERT_EQ(stalls[0].tensors.size(), 1u);
  EXPECT_EQ(stalls[0].tensors[0].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_TRUE(c.takeUndiagnosed(kNow + std::chrono::seconds(5), 2.0, 4).empty());
  EXPECT_EQ(c.stalls(kNow, 2.0).size(), 1u);  // the stall warning still sees it
}

TEST(EngineNegotiation, StallReportNamesTheMissingRankItsHostAndTheCallSite) {
  StallNotice n;
  n.op = OpType::kAllreduce;
  n.name = "grad.w";
  n.tensors = "[4] float32";
  n.missing = {1};
  n.hosts = {"node-b"};
  n.waited_s = 2.3;
  auto back = std::vector<StallNotice>{};
  decodeResponses(encodeResponses({}, {n}), &back);
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].hosts, n.hosts);
  const std::string waiter = StallReport::format(back[0], 0, 2.0, "train.py:42");
  EXPECT_NE(waiter.find("ALLREDUCE 'grad.w' [4] float32 has waited 2.3 s for rank 1 (host "
                        "node-b), which has not submitted it"),
            std::string::npos)
      << waiter;
  EXPECT_NE(waiter.find("Rank 0 waits for it at train.py:42"), std::string::npos) << waiter;
  const std::string culprit = StallReport::format(back[0], 1, 2.0, "");
  EXPECT_NE(culprit.find("This rank (1) is one of them"), std::string::npos) << culprit;
}

// A site finder that counts its calls, for StallReport::setSiteFinder.
int site_finder_calls = 0;
int findTrainSite(char* site, size_t capacity) {
  ++site_finder_calls;
  std::snprintf(site, capacity, "%s", "train.py:57 in step");
  return 1;
}

TEST(EngineNegotiation, StallReportAsksTheSiteFinderOnceForNoticesWithoutANotedSite) {
  StallNotice waited_on;  // rank 0 waits for rank 1 in both
  waited_on.op = OpType::kAllreduce;
  waited_on.missing = {1};
  waited_on.hosts = {"node-b"};
  waited_on.waited_s = 2.0;
  StallNotice bucket = waited_on, metric = waited_on, noted = waited_on;
  bucket.name = "pt.0.allreduce.float32.68.2";
  metric.name = "pt.0.allreduce.float32.4.1";
  noted.name = "grad.w";
  StallReport::setSiteFinder(&findTrainSite);
  site_finder_calls = 0;

  StallReport waiter(0, 2.0);
  waiter.noteCallSite("grad.w", "train.py:42 in step");
  waiter.report({noted});
  EXPECT_EQ(site_finder_calls, 0);  // the wait noted its own site
  EXPECT_NE(waiter.lastReport().find("Rank 0 waits for it at train.py:42 in step."),
            std::string::npos)
      << waiter.lastReport();
  waiter.report({bucket, metric, noted});
  EXPECT_EQ(site_finder_calls, 1);  // once for the line
  const std::string line = waiter.lastReport();
  EXPECT_NE(line.find("float32.68.2' has waited 2.0 s for rank 1 (host node-b), which has not "
                      "submitted it. Rank 0 submitted it; its Python code is at train.py:57 in "
                      "step. Also: "),
            std::string::npos)
      << line;
  EXPECT_NE(line.find("float32.4.1' has waited 2.0 s for rank 1 (host node-b), which has not "
                      "submitted it. Rank 0 submitted it; its Python code is at train.py:57"),
            std::string::npos)
      << line;
  EXPECT_NE(line.find("Rank 0 waits for it at train.py:42 in step."), std::string::npos) << line;

  StallReport culprit(1, 2.0);  // the late rank has nothing to find
  culprit.report({bucket});
  EXPECT_EQ(site_finder_calls, 1);
  EXPECT_NE(culprit.lastReport().find("This rank (1) is one of them."), std::string::npos);
  StallReport::setSiteFinder(nullptr);
  waiter.report({metric});
  EXPECT_NE(waiter.lastReport().find("Rank 0 submitted it. A rank"), std::string::npos)
      << waiter.lastReport();
}

TEST(EngineWire, RoundTrip) {
  Request q = allreduce("name", {3, 4}, DataType::kBFloat16);
  q.prescale = 0.25;
  q.set_ranks = {1, 3};
  auto back = decodeRequests(encodeRequests({q, q}));
  ASSERT_EQ(back.size(), 2u);
  EXPECT_TRUE(back[1].sameMetadata(q));
  EXPECT_EQ(back[1].name, "name");

  Response r;
  r.name = "x";
  r.is_error = true;
  r.error_code = StatusCode::kMismatch;
  r.error_message = "bad";
  r.first_dims = {1, 2, 3};
  auto rs = decodeResponses(encodeResponses({r}));
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_EQ(rs[0].error_message, "bad");
  EXPECT_EQ(rs[0].first_dims, r.first_dims);

  std::vector<uint8_t> truncated = encodeRequests({q});
  truncated.resize(truncated.size() - 3);
  EXPECT_THROW(decodeRequests(truncated), InternalError);
}

}  // namespace
}  // namespace perseus::engine
