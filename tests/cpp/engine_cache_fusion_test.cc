// Response cache and fusion planning as pure functions.
#include <gtest/gtest.h>

#include "fusion/tensor_groups.h"
#include "negotiation/control.h"
#include "negotiation/response_cache.h"

namespace perseus::engine {
namespace {

Request req(const std::string& name, std::vector<int64_t> shape, OpType op = OpType::kAllreduce) {
  Request q;
  q.op = op;
  q.name = name;
  q.tensors.push_back({DataType::kFloat32, std::move(shape)});
  return q;
}

Response resp(const Request& q) {
  Response r;
  r.op = q.op;
  r.name = q.name;
  r.tensors = q.tensors;
  return r;
}

TEST(EngineResponseCache, HitMissInvalid) {
  ResponseCache c(4);
  Request a = req("a", {4});
  EXPECT_EQ(c.lookup(a).state, ResponseCache::Lookup::kMiss);
  EXPECT_EQ(c.put(resp(a), &a), -1);
  auto hit = c.lookup(a);
  EXPECT_EQ(hit.state, ResponseCache::Lookup::kHit);
  EXPECT_EQ(hit.bit, 0);
  EXPECT_EQ(c.lookup(req("a", {5})).state, ResponseCache::Lookup::kInvalid);
  Request barrier;
  barrier.op = OpType::kBarrier;
  barrier.name = "b";
  EXPECT_EQ(c.lookup(barrier).state, ResponseCache::Lookup::kMiss);
}

TEST(EngineResponseCache, LruEvictionIsDeterministicAndBitsAreReused) {
  // Two caches fed the same sequence agree on every bit: that is what keeps ranks consistent.
  ResponseCache x(2), y(2);
  for (ResponseCache* c : {&x, &y}) {
    Request a = req("a", {1}), b = req("b", {1}), d = req("d", {1});
    c->put(resp(a), &a);
    c->put(resp(b), &b);
    c->touch(0);                        // a is now the most recent
    EXPECT_EQ(c->put(resp(d), &d), 1);  // evicts b
    EXPECT_EQ(c->lookup(d).bit, 1);     // d reuses b's bit
    EXPECT_EQ(c->lookup(b).state, ResponseCache::Lookup::kMiss);
  }
  EXPECT_EQ(x.numBits(), 2);
}

TEST(EngineResponseCache, DisabledWithZeroCapacity) {
  ResponseCache c(0);
  Request a = req("a", {1});
  c.put(resp(a), &a);
  EXPECT_EQ(c.lookup(a).state, ResponseCache::Lookup::kMiss);
}

TEST(EngineControlVector, OrFlagsAreInvertedAndBits) {
  ControlVector a(130), b(130);
  a.setFlag(ControlFlag::kUncached);
  a.setReady(3);
  b.setReady(3);
  a.setReady(129);
  b.setInvalid(64);
  b.setSetWork(5);
  ControlVector r(130);
  for (size_t i = 0; i < r.numWords(); ++i) r.data()[i] = a.data()[i] & b.data()[i];
  EXPECT_TRUE(r.anyFlag(ControlFlag::kUncached));
  EXPECT_FALSE(r.anyFlag(ControlFlag::kShutdown));
  EXPECT_TRUE(r.ready(3));
  EXPECT_FALSE(r.ready(129));
  EXPECT_TRUE(r.invalid(64));
  EXPECT_FALSE(r.invalid(3));
  EXPECT_TRUE(r.anySetWork(5));
  EXPECT_FALSE(r.anySetWork(4));
}

TEST(EngineFusion, PacksSameKindUpToThreshold) {
  std::vector<Response> rs;
  for (int i = 0; i < 5; ++i) rs.push_back(resp(req("t" + std::to_string(i), {16})));  // 64 B each
  auto plan = fusion::planGroups(rs, 2, 150);
  ASSERT_EQ(plan.size(), 3u);
  EXPECT_EQ(plan[0].items.size(), 2u);
  EXPECT_EQ(plan[0].bytes, 128u);
  EXPECT_EQ(plan[1].items.size(), 2u);
  EXPECT_EQ(plan[2].items.size(), 1u);
  EXPECT_FALSE(plan[2].fused());
}

TEST(EngineFusion, KeysSeparateDtypeOpScaleAndRoot) {
  std::vector<Response> rs;
  rs.push_back(resp(req("a", {4})));
  Response b = resp(req("b", {4}));
  b.tensors[0].dtype = DataType::kFloat64;
  rs.push_back(b);
  Response c = resp(req("c", {4}));
  c.reduce_op = ReduceOp::kMax;
  rs.push_back(c);
  Response d = resp(req("d", {4}));
  d.postscale = 0.5;
  rs.push_back(d);
  rs.push_back(resp(req("e", {4})));  // fuses with a (look-ahead past b, c, d)
  Response f = resp(req("f", {4}, OpType::kBroadcast));
  f.root = 1;
  rs.push_back(f);
  Response g = resp(req("g", {4}, OpType::kBroadcast));
  rs.push_back(g);
  rs.push_back(resp(req("h", {4}, OpType::kAlltoall)));
  Response err = resp(req("i", {4}));
  err.is_error = true;
  rs.push_back(err);
  auto plan = fusion::planGroups(rs, 2, 1 << 20);
  ASSERT_EQ(plan.size(), 8u);
  EXPECT_EQ(plan[0].items.size(), 2u);
  EXPECT_EQ(plan[0].items[1].response, 4u);
}

TEST(EngineFusion, ZeroThresholdAndHugeTensorsRunAlone) {
  std::vector<Response> rs = {resp(req("a", {4})), resp(req("b", {4}))};
  EXPECT_EQ(fusion::planGroups(rs, 2, 0).size(), 2u);
  rs.insert(rs.begin() + 1, resp(req("big", {1000})));
  auto plan = fusion::planGroups(rs, 2, 64);
  ASSERT_EQ(plan.size(), 2u);  // a+b fuse around the big one
  EXPECT_EQ(plan[0].items.size(), 2u);
  EXPECT_EQ(plan[1].items[0].response, 1u);
}

TEST(EngineFusion, GroupedRequestTensorsAndAllgatherBytes) {
  Request q = req("grp", {2});
  q.tensors.push_back({DataType::kFloat32, {3}});
  Response g = resp(q);
  Response ag = resp(req("ag", {2, 3}, OpType::kAllgather));
  ag.first_dims = {2, 5};
  auto plan = fusion::planGroups({g, ag}, 2, 1 << 20);
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0].items.size(), 2u);
  EXPECT_EQ(fusion::fusionBytes(ag, 0, 2), (2 + 5) * 3 * 4u);
}

}  // namespace
}  // namespace perseus::engine
