// Posted allreduces (Note [Posted collectives], engine/posted/posted_collectives.h) through the
// engine: small allreduces of a name negotiated before skip negotiation, give the negotiated
// results, and fall back to negotiation whenever the ranks disagree, a rank is late or joins. Ranks
// as threads with their own engines over real shared memory.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "engine/posted/posted_collectives.h"
#include "kernels/reduce.h"
#include "support/engine_ranks.h"

namespace perseus::engine {
namespace {

using testing::EngineRanks;
using testing::engineTestParams;

TensorArg arg(const void* data, std::vector<int64_t> shape, DataType t = DataType::kFloat32) {
  return TensorArg{data, t, std::move(shape), -1};
}

StatusCode waitFor(Engine& e, const std::shared_ptr<Handle>& h) {
  if (!e.waitFor(*h, 20.0, 50))
    throw std::runtime_error("handle '" + h->name() + "' did not complete");
  return h->status();
}

void expectOk(Engine& e, const std::shared_ptr<Handle>& h) {
  if (waitFor(e, h) != StatusCode::kOk) throw std::runtime_error(h->name() + ": " + h->message());
}

// Rank r's element i in iteration k, exact in every dtype below (small integers).
double input(int r, int k, size_t i) {
  return static_cast<double>((r + 1) * ((k + static_cast<int>(i)) % 3 + 1));
}

void fill(std::vector<unsigned char>& buf, DataType t, int r, int k) {
  const size_t n = buf.size() / dataTypeSize(t);
  std::vector<float> f(n);
  for (size_t i = 0; i < n; ++i) f[i] = static_cast<float>(input(r, k, i));
  switch (t) {
    case DataType::kFloat32:
      std::memcpy(buf.data(), f.data(), buf.size());
      break;
    case DataType::kFloat16:
      kernels::floatToHalfArray(reinterpret_cast<uint16_t*>(buf.data()), f.data(), n);
      break;
    case DataType::kBFloat16:
      kernels::floatToBfloat16Array(reinterpret_cast<uint16_t*>(buf.data()), f.data(), n);
      break;
    case DataType::kInt32:
      for (size_t i = 0; i < n; ++i)
        reinterpret_cast<int32_t*>(buf.data())[i] = static_cast<int32_t>(f[i]);
      break;
    case DataType::kFloat64:
      for (size_t i = 0; i < n; ++i) reinterpret_cast<double*>(buf.data())[i] = f[i];
      break;
    default:
      throw std::runtime_error("dtype not covered by the test");
  }
}

double element(const std::vector<unsigned char>& buf, DataType t, size_t i) {
  switch (t) {
    case DataType::kFloat32:
      return reinterpret_cast<const float*>(buf.data())[i];
    case DataType::kFloat16:
      return kernels::halfToFloat(reinterpret_cast<const uint16_t*>(buf.data())[i]);
    case DataType::kBFloat16:
      return kernels::bfloat16ToFloat(reinterpret_cast<const uint16_t*>(buf.data())[i]);
    case DataType::kInt32:
      return reinterpret_cast<const int32_t*>(buf.data())[i];
    case DataType::kFloat64:
      return reinterpret_cast<const double*>(buf.data())[i];
    default:
      throw std::runtime_error("dtype not covered by the test");
  }
}

double expected(ReduceOp op, int n, int k, size_t i, double pre, double post) {
  double acc = op == ReduceOp::kProduct ? 1
               : op == ReduceOp::kMin   ? 1e30
               : op == ReduceOp::kMax   ? -1e30
                                        : 0;
  for (int r = 0; r < n; ++r) {
    const double v = input(r, k, i) * pre;
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAverage:
        acc += v;
        break;
      case ReduceOp::kMin:
        acc = std::min(acc, v);
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, v);
        break;
      case ReduceOp::kProduct:
        acc *= v;
        break;
      case ReduceOp::kAdasum:
        throw std::runtime_error("Adasum is never posted");
    }
  }
  if (op == ReduceOp::kAverage) acc /= n;
  return acc * post;
}

TEST(PostedCollectives, RepeatedSmallAllreducesArePostedAndMatchTheReference) {
  for (int n : {2, 3}) {
    EngineRanks ranks(n, engineTestParams());
    ranks.run([&](int r, Engine& e) {
      struct Case {
        DataType t;
        ReduceOp op;
        double pre, post;
        int64_t count;
      };
      const Case cases[] = {
          {DataType::kFloat32, ReduceOp::kSum, 1, 1, 1},
          {DataType::kFloat32, ReduceOp::kAverage, 1, 1, 257},
          {DataType::kFloat32, ReduceOp::kSum, 0.5, 4, 1023},
          {DataType::kFloat64, ReduceOp::kMax, 1, 1, 5},
          {DataType::kInt32, ReduceOp::kMin, 1, 1, 7},
          {DataType::kInt32, ReduceOp::kProduct, 1, 1, 3},
          {DataType::kFloat16, ReduceOp::kSum, 1, 1, 33},
          {DataType::kBFloat16, ReduceOp::kSum, 2, 0.5, 9},
      };
      const uint64_t posted_before = e.stats().posted_allreduces;
      int c = 0;
      for (const Case& cs : cases) {
        const std::string name = "posted." + std::to_string(c++);
        std::vector<unsigned char> in(static_cast<size_t>(cs.count) * dataTypeSize(cs.t)),
            out(in.size());
        for (int k = 0; k < 6; ++k) {
          fill(in, cs.t, r, k);
          // Out of place on even iterations, in place on odd ones.
          void* dst = k % 2 ? in.data() : out.data();
          expectOk(e, e.allreduce(name, {arg(in.data(), {cs.count}, cs.t)}, {dst}, cs.op, cs.pre,
                                  cs.post));
          const std::vector<unsigned char>& got = k % 2 ? in : out;
          for (size_t i = 0; i < static_cast<size_t>(cs.count); ++i) {
            const double want = expected(cs.op, n, k, i, cs.pre, cs.post);
            ASSERT_NEAR(element(got, cs.t, i), want,
                        std::abs(want) * 1e-2 + (cs.t == DataType::kInt32 ? 0 : 1e-3))
                << name << " n=" << n << " rank " << r << " iteration " << k << " element " << i;
          }
        }
      }
      // The first two runs of each name are negotiated (a slot from the second), the four after
      // them are posted.
      EXPECT_EQ(e.stats().posted_allreduces - posted_before,
                4u * (sizeof(cases) / sizeof(cases[0])));
    });
  }
}

TEST(PostedCollectives, LargerTensorsAndGroupsAreNegotiated) {
  EngineRanks ranks(2, engineTestParams());
  ranks.run([&](int, Engine& e) {
    std::vector<float> big(PostedCollectives::kMaxBytes / sizeof(float) + 1, 1.0f), a(4, 1.0f),
        b(4, 1.0f);
    for (int k = 0; k < 3; ++k) {
      expectOk(e, e.allreduce("big", {arg(big.data(), {static_cast<int64_t>(big.size())})},
                              {big.data()}, ReduceOp::kSum));
      expectOk(e, e.allreduce("pair", {arg(a.data(), {4}), arg(b.data(), {4})},
                              {a.data(), b.data()}, ReduceOp::kSum));
    }
    EXPECT_EQ(e.stats().posted_allreduces, 0u);
    EXPECT_FLOAT_EQ(big[0], 8.0f);
    EXPECT_FLOAT_EQ(b[3], 8.0f);
  });
}

TEST(PostedCollectives, ADifferenceAfterPostingFailsEveryRankAndTheNameIsPostedAgain) {
  EngineRanks ranks(3, engineTestParams());
  ranks.run([&](int r, Engine& e) {
    std::vector<float> buf(8, 1.0f);
    for (int k = 0; k < 3; ++k)
      expectOk(e, e.allreduce("x", {arg(buf.data(), {4})}, {buf.data()}, ReduceOp::kMax));
    const uint64_t posted = e.stats().posted_allreduces;
    EXPECT_EQ(posted, 1u);  // a slot from the second run
    // Shape on one rank, then the reduce op on another: every rank fails, naming the tensor.
    auto h = e.allreduce("x", {arg(buf.data(), {r == 1 ? 8 : 4})}, {buf.data()}, ReduceOp::kMax);
    EXPECT_EQ(waitFor(e, h), StatusCode::kMismatch);
    EXPECT_NE(h->message().find("'x'"), std::string::npos) << h->message();
    EXPECT_NE(h->message().find("set rank 1"), std::string::npos) << h->message();
    for (int k = 0; k < 2; ++k)
      expectOk(e, e.allreduce("x", {arg(buf.data(), {4})}, {buf.data()}, ReduceOp::kMax));
    h = e.allreduce("x", {arg(buf.data(), {4})}, {buf.data()},
                    r == 2 ? ReduceOp::kMin : ReduceOp::kMax);
    EXPECT_EQ(waitFor(e, h), StatusCode::kMismatch);
    // An allgather of the posted name on one rank fails too.
    for (int k = 0; k < 2; ++k)
      expectOk(e, e.allreduce("x", {arg(buf.data(), {4})}, {buf.data()}, ReduceOp::kMax));
    h = r == 0 ? e.allgather("x", {arg(buf.data(), {4})})
               : e.allreduce("x", {arg(buf.data(), {4})}, {buf.data()}, ReduceOp::kMax);
    EXPECT_EQ(waitFor(e, h), StatusCode::kMismatch);
    // Usable, and the name goes back to the posted path after one negotiated run.
    std::vector<float> v(4, static_cast<float>(r));
    for (int k = 0; k < 3; ++k)
      expectOk(e, e.allreduce("x", {arg(v.data(), {4})}, {v.data()}, ReduceOp::kMax));
    EXPECT_FLOAT_EQ(v[0], 2.0f);
    EXPECT_EQ(e.stats().posted_allreduces, posted + 1 + 1 + 2);
  });
}

TEST(PostedCollectives, ASecondSubmissionOfANameWhosePostIsInFlightFailsLocally) {
  EngineRanks ranks(2, engineTestParams());
  std::atomic<bool> checked{false};
  ranks.run([&](int r, Engine& e) {
    std::vector<float> v(4, 1.0f), w(4, 1.0f);
    for (int k = 0; k < 3; ++k)
      expectOk(e, e.allreduce("d", {arg(v.data(), {4})}, {v.data()}, ReduceOp::kSum));
    ASSERT_EQ(e.stats().posted_allreduces, 1u);
    std::fill(v.begin(), v.end(), static_cast<float>(r + 1));
    if (r == 1) {
      while (!checked.load()) std::this_thread::yield();
    }
    auto h = e.allreduce("d", {arg(v.data(), {4})}, {v.data()}, ReduceOp::kSum);
    if (r == 0) {
      // Rank 1 has not posted: the name is in flight here, whichever path the second one takes.
      EXPECT_THROW(e.allreduce("d", {arg(w.data(), {4})}, {w.data()}, ReduceOp::kSum),
                   DuplicateNameError);
      EXPECT_THROW(e.allreduce("d", {arg(w.data(), {2}), arg(w.data() + 2, {2})},
                               {w.data(), w.data() + 2}, ReduceOp::kSum),
                   DuplicateNameError);
      EXPECT_THROW(e.allgather("d", {arg(w.data(), {4})}), DuplicateNameError);
      checked.store(true);
    }
    expectOk(e, h);
    EXPECT_FLOAT_EQ(v[2], 3.0f);
    EXPECT_EQ(e.stats().posted_allreduces, 2u);  // it was posted
    // Nothing was revoked: the name is still posted.
    expectOk(e, e.allreduce("d", {arg(v.data(), {4})}, {v.data()}, ReduceOp::kSum));
    EXPECT_FLOAT_EQ(v[2], 6.0f);
    EXPECT_EQ(e.stats().posted_allreduces, 3u);
  });
}

// A waiting caller settles its post and completes the handle before it drops the post from
// its slot (PostedCollectives::progress()). A callback runs in between, on that caller's
// thread: when it submits the name again (the next step's collective of the same tensor),
// the name must be free, not a duplicate, and the sums right.
TEST(PostedCollectives, ACallbackThatSubmitsItsNameAgainFindsItFree) {
  EngineRanks ranks(2, engineTestParams());
  ranks.run([&](int r, Engine& e) {
    std::vector<float> v(4), w(4);
    for (int k = 0; k < 2; ++k)
      expectOk(e, e.allreduce("again", {arg(v.data(), {4})}, {v.data()}, ReduceOp::kSum));
    const uint64_t posted_before = e.stats().posted_allreduces;
    constexpr int kRounds = 200;
    for (int k = 0; k < kRounds; ++k) {
      std::fill(v.begin(), v.end(), static_cast<float>(r + k));
      std::fill(w.begin(), w.end(), static_cast<float>(r));
      std::shared_ptr<Handle> next;
      std::string error;
      std::atomic<bool> fired{false};
      auto h = e.allreduce("again", {arg(v.data(), {4})}, {v.data()}, ReduceOp::kSum);
      e.setCallback(*h, [&](StatusCode, const std::string&) {
        try {
          next = e.allreduce("again", {arg(w.data(), {4})}, {w.data()}, ReduceOp::kSum);
        } catch (const std::exception& x) {
          error = x.what();
        }
        fired.store(true);
      });
      expectOk(e, h);
      while (!fired.load()) std::this_thread::yield();  // the engine thread may run it
      ASSERT_EQ(error, "") << "round " << k;
      ASSERT_FLOAT_EQ(v[3], static_cast<float>(2 * k + 1)) << "round " << k;
      expectOk(e, next);
      ASSERT_FLOAT_EQ(w[3], 1.0f) << "round " << k;
    }
    EXPECT_EQ(e.stats().posted_allreduces - posted_before, static_cast<uint64_t>(2 * kRounds));
  });
}

TEST(PostedCollectives, BroadcastsAllgathersAndReducescattersArePostedAndMatchTheReference) {
  for (int n : {2, 3}) {
    EngineRanks ranks(n, engineTestParams());
    ranks.run([&](int r, Engine& e) {
      const Engine::Stats before = e.stats();
      std::vector<float> b(5), out(5);
      // Rank r gathers r + 1 rows of 3 int32s: rows of different lengths on every rank.
      std::vector<int32_t> rows(static_cast<size_t>(r + 1) * 3);
      // 7 rows of 2 doubles, scattered in blocks of 3, 2, 2 (n = 3) or 4, 3 (n = 2) rows.
      std::vector<double> full(14);
      for (int k = 0; k < 6; ++k) {
        for (size_t i = 0; i < b.size(); ++i)
          b[i] = static_cast<float>(10 * r + k + static_cast<int>(i));
        // In place on even iterations, out of place on odd ones; root 1 throughout.
        void* dst = k % 2 ? out.data() : b.data();
        expectOk(e, e.broadcast("posted.b", arg(b.data(), {5}), dst, 1));
        const std::vector<float>& got = k % 2 ? out : b;
        for (size_t i = 0; i < got.size(); ++i) {
          ASSERT_EQ(got[i], static_cast<float>(10 + k + static_cast<int>(i)))
              << "n=" << n << " rank " << r << " k " << k;
        }
        for (size_t i = 0; i < rows.size(); ++i) rows[i] = 100 * r + k + static_cast<int32_t>(i);
        auto h = e.allgather("posted.g", {arg(rows.data(), {r + 1, 3}, DataType::kInt32)});
        expectOk(e, h);
        ASSERT_EQ(h->outputs().size(), 1u);
        ASSERT_EQ(h->outputs()[0].shape, (std::vector<int64_t>{int64_t(n) * (n + 1) / 2, 3}));
        const auto* g = static_cast<const int32_t*>(h->outputs()[0].ptr());
        size_t at = 0;
        for (int q = 0; q < n; ++q) {
          for (int i = 0; i < (q + 1) * 3; ++i) {
            ASSERT_EQ(g[at++], 100 * q + k + i)
                << "n=" << n << " rank " << r << " k " << k << " from " << q;
          }
        }
        for (size_t i = 0; i < full.size(); ++i) full[i] = (r + 1) * static_cast<double>(k + i);
        // Average with a prescale of 2: every element is 2 x the mean of (q + 1)(k + i).
        auto s = e.reducescatter("posted.s", {arg(full.data(), {7, 2}, DataType::kFloat64)},
                                 ReduceOp::kAverage, 2.0, 1.0);
        expectOk(e, s);
        const int64_t mine = blockRows(7, n, r);
        int64_t first = 0;
        for (int q = 0; q < r; ++q) first += blockRows(7, n, q);
        ASSERT_EQ(s->outputs()[0].shape, (std::vector<int64_t>{mine, 2}));
        const auto* got_s = static_cast<const double*>(s->outputs()[0].ptr());
        for (int64_t i = 0; i < mine * 2; ++i) {
          const double want = 2.0 * (n + 1) / 2.0 * static_cast<double>(k + first * 2 + i);
          ASSERT_DOUBLE_EQ(got_s[i], want)
              << "n=" << n << " rank " << r << " k " << k << " element " << i;
        }
      }
      // The first two runs of each name are negotiated (a slot from the second on), the four
      // after them are posted.
      const Engine::Stats after = e.stats();
      EXPECT_EQ(after.posted_collectives - before.posted_collectives, 12u);
      EXPECT_EQ(after.posted_allreduces, before.posted_allreduces);
    });
  }
}

// Through the pools (posts by address off: Note [Posts by address] lets larger ones post).
Params poolOnlyParams() {
  Params p = engineTestParams();
  p.posted_by_address = 0;
  return p;
}

TEST(PostedCollectives, BroadcastsAndAllgathersPostUpTo64KibAndReductionsUpTo4Kib) {
  EngineRanks ranks(2, poolOnlyParams());
  ranks.run([&](int r, Engine& e) {
    constexpr size_t kCopyFloats = PostSlots::kMaxCopyBytes / sizeof(float);
    std::vector<float> b(kCopyFloats), over(kCopyFloats + 1), sum(PostSlots::kMaxBytes / 4 + 1);
    for (int k = 0; k < 4; ++k) {
      std::fill(b.begin(), b.end(), static_cast<float>(10 * r + k));
      expectOk(e, e.broadcast("mid.b", arg(b.data(), {int64_t(kCopyFloats)}), b.data(), 1));
      ASSERT_EQ(b.back(), static_cast<float>(10 + k)) << "rank " << r << " k " << k;
      auto h = e.allgather("mid.g", {arg(b.data(), {int64_t(kCopyFloats)})});
      expectOk(e, h);
      const auto* g = static_cast<const float*>(h->outputs()[0].ptr());
      ASSERT_EQ(g[0], static_cast<float>(10 + k));
      ASSERT_EQ(g[2 * kCopyFloats - 1], static_cast<float>(10 + k));
      expectOk(e, e.broadcast("over.b", arg(over.data(), {int64_t(over.size())}), over.data(), 0));
      std::fill(sum.begin(), sum.end(), 1.0f);
      expectOk(e, e.allreduce("over.r", {arg(sum.data(), {int64_t(sum.size())})}, {sum.data()},
                              ReduceOp::kSum));
      ASSERT_EQ(sum.back(), 2.0f);
    }
    // mid.b and mid.g: negotiated twice (a slot from the second run), posted twice.
    EXPECT_EQ(e.stats().posted_collectives, 4u);
  });
}

TEST(PostedCollectives, ContributionsOver4KibTakeAtMostHalfOfThePool) {
  // 64 KiB broadcasts: 8 fill half of each rank's 1 MiB pool; a 4-float allreduce named after
  // them still gets a slot.
  EngineRanks ranks(2, poolOnlyParams());
  ranks.run([&](int r, Engine& e) {
    constexpr int kNames = 10;
    std::vector<float> b(PostSlots::kMaxCopyBytes / sizeof(float)), v(4);
    for (int k = 0; k < 3; ++k) {
      for (int i = 0; i < kNames; ++i) {
        std::fill(b.begin(), b.end(), static_cast<float>(r + i + k));
        expectOk(e, e.broadcast("mid." + std::to_string(i), arg(b.data(), {int64_t(b.size())}),
                                b.data(), 0));
        ASSERT_EQ(b.back(), static_cast<float>(i + k)) << "name " << i << " round " << k;
      }
      std::fill(v.begin(), v.end(), 1.0f);
      expectOk(e, e.allreduce("small", {arg(v.data(), {4})}, {v.data()}, ReduceOp::kSum));
      ASSERT_EQ(v[3], 2.0f);
    }
    EXPECT_EQ(e.stats().posted_collectives, 8u + 1u);
    EXPECT_EQ(e.stats().posted_allreduces, 1u);
  });
}

TEST(PostedCollectives, AnotherRootFailsEveryRankAndOtherRowsAreNegotiated) {
  EngineRanks ranks(3, engineTestParams());
  ranks.run([&](int r, Engine& e) {
    std::vector<float> b(4, static_cast<float>(r));
    for (int k = 0; k < 2; ++k) expectOk(e, e.broadcast("b", arg(b.data(), {4}), b.data(), 0));
    // Rank 2 names another root: every rank fails, naming the tensor.
    auto h = e.broadcast("b", arg(b.data(), {4}), b.data(), r == 2 ? 1 : 0);
    EXPECT_EQ(waitFor(e, h), StatusCode::kMismatch);
    EXPECT_NE(h->message().find("'b'"), std::string::npos) << h->message();
    // Usable, and posted again after one negotiated run.
    std::fill(b.begin(), b.end(), static_cast<float>(r + 7));
    for (int k = 0; k < 3; ++k) expectOk(e, e.broadcast("b", arg(b.data(), {4}), b.data(), 2));
    EXPECT_FLOAT_EQ(b[3], 9.0f);
    // An allgather whose rows change on one rank after posting: negotiated with the new rows.
    std::vector<float> v(4, static_cast<float>(r));
    for (int k = 0; k < 2; ++k) expectOk(e, e.allgather("g", {arg(v.data(), {2, 2})}));
    const int rows = r == 1 ? 1 : 2;
    auto g = e.allgather("g", {arg(v.data(), {rows, 2})});
    expectOk(e, g);
    EXPECT_EQ(g->outputs()[0].shape, (std::vector<int64_t>{5, 2}));
    const auto* out = static_cast<const float*>(g->outputs()[0].ptr());
    EXPECT_EQ(std::vector<float>(out, out + 10),
              (std::vector<float>{0, 0, 0, 0, 1, 1, 2, 2, 2, 2}));
    // 2 broadcasts were posted (a name gets a slot at its second run; after the mismatch the
    // old slot's name gets a new one at once); the allgather with new rows gets a new slot.
    EXPECT_EQ(e.stats().posted_collectives, 2u);
    expectOk(e, e.allgather("g", {arg(v.data(), {rows, 2})}));
    EXPECT_EQ(e.stats().posted_collectives, 3u);
  });
}

TEST(PostedCollectives, ASecondBroadcastOfANameInFlightFailsLocally) {
  EngineRanks ranks(2, engineTestParams());
  std::atomic<bool> checked{false};
  ranks.run([&](int r, Engine& e) {
    std::vector<float> v(4, static_cast<float>(r));
    for (int k = 0; k < 2; ++k) expectOk(e, e.broadcast("d", arg(v.data(), {4}), v.data(), 0));
    if (r == 1) {
      while (!checked.load()) std::this_thread::yield();
    }
    auto h = e.broadcast("d", arg(v.data(), {4}), v.data(), 0);
    if (r == 0) {
      EXPECT_THROW(e.broadcast("d", arg(v.data(), {4}), v.data(), 0), DuplicateNameError);
      EXPECT_THROW(e.allgather("d", {arg(v.data(), {4})}), DuplicateNameError);
      checked.store(true);
    }
    expectOk(e, h);
    EXPECT_FLOAT_EQ(v[0], 0.0f);
    EXPECT_EQ(e.stats().posted_collectives, 1u);  // it was posted
  });
}

TEST(PostedCollectives, ALateRankFallsBackToNegotiationWithTheRightResult) {
  Params p = engineTestParams();
  p.timeout_s = 2;  // patience: 0.25 s
  EngineRanks ranks(2, p);
  ranks.run([&](int r, Engine& e) {
    std::vector<float> v(4);
    for (int k = 0; k < 5; ++k) {
      std::fill(v.begin(), v.end(), static_cast<float>(r + k));
      // Iteration 2: rank 1 comes 0.6 s late, past rank 0's patience.
      if (r == 1 && k == 2) std::this_thread::sleep_for(std::chrono::milliseconds(600));
      // Rank 0 waits with the handle's own blocking wait: the engine thread finishes the post.
      auto h = e.allreduce("late", {arg(v.data(), {4})}, {v.data()}, ReduceOp::kSum);
      if (r == 0) {
        ASSERT_TRUE(h->wait(20.0));
        ASSERT_EQ(h->status(), StatusCode::kOk) << h->message();
      } else {
        expectOk(e, h);
      }
      EXPECT_FLOAT_EQ(v[3], static_cast<float>(1 + 2 * k)) << "iteration " << k;
    }
    // Iterations 0 and 1 were negotiated (a slot from 1), 2 fell back, and 3 and 4 (the name
    // got a new slot at 2) were posted.
    EXPECT_EQ(e.stats().posted_allreduces, 2u);
  });
}

TEST(PostedCollectives, CallbacksCompleteWithoutAWaiter) {
  EngineRanks ranks(2, engineTestParams());
  ranks.run([&](int r, Engine& e) {
    std::vector<float> v(16, 1.0f);
    // Two negotiated runs: the name has a slot from the second.
    for (int k = 0; k < 2; ++k)
      expectOk(e, e.allreduce("cb", {arg(v.data(), {16})}, {v.data()}, ReduceOp::kSum));
    int slow = 0;
    for (int k = 0; k < 20; ++k) {
      std::atomic<bool> fired{false};
      std::fill(v.begin(), v.end(), 1.0f);
      // Rank 1 posts after rank 0's engine thread went to sleep listening.
      if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(k % 2 ? 5 : 0));
      auto h = e.allreduce("cb", {arg(v.data(), {16})}, {v.data()}, ReduceOp::kSum);
      e.setCallback(*h,
                    [&](StatusCode s, const std::string&) { fired.store(s == StatusCode::kOk); });
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (!fired.load() && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
      ASSERT_TRUE(fired.load()) << "iteration " << k;
      // The engine thread listens once the callback is attached: rung, not timed out.
      if (std::chrono::steady_clock::now() - (deadline - std::chrono::seconds(5)) >
          std::chrono::milliseconds(50))
        ++slow;
      EXPECT_FLOAT_EQ(v[15], 2.0f);
    }
    EXPECT_LE(slow, 3) << "callbacks waited for a timeout instead of a ring";
    EXPECT_GE(e.stats().posted_allreduces, 20u);
  });
}

TEST(PostedCollectives, JoinSendsPostsBackToNegotiationWithZerosFromTheJoinedRank) {
  EngineRanks ranks(3, engineTestParams());
  ranks.run([&](int r, Engine& e) {
    std::vector<float> v(4);
    for (int k = 0; k < 4; ++k) {
      std::fill(v.begin(), v.end(), static_cast<float>(r + 1));
      expectOk(e, e.allreduce("j", {arg(v.data(), {4})}, {v.data()}, ReduceOp::kSum));
      EXPECT_FLOAT_EQ(v[0], 6.0f);
    }
    EXPECT_EQ(e.stats().posted_allreduces, 2u);
    if (r == 2) {
      expectOk(e, e.join());
      return;
    }
    for (int k = 0; k < 3; ++k) {
      std::fill(v.begin(), v.end(), static_cast<float>(r + 1));
      expectOk(e, e.allreduce("j", {arg(v.data(), {4})}, {v.data()}, ReduceOp::kSum));
      EXPECT_FLOAT_EQ(v[0], 3.0f) << "iteration " << k;
    }
    expectOk(e, e.join());
  });
}

TEST(PostedCollectives, ARankThatCannotPostTurnsPostingOffForEveryRank) {
  // Rank 1 has PERSEUS_POSTED_ALLREDUCE=0: had rank 0 posted, each op would wait out the
  // patience (1 s here) before negotiating.
  EngineRanks ranks(2, engineTestParams(), [](int r, Params& p) { p.posted_allreduce = r != 1; });
  ranks.run([&](int r, Engine& e) {
    std::vector<float> v(4);
    const auto start = std::chrono::steady_clock::now();
    for (int k = 0; k < 10; ++k) {
      std::fill(v.begin(), v.end(), static_cast<float>(r + k));
      expectOk(e, e.allreduce("off", {arg(v.data(), {4})}, {v.data()}, ReduceOp::kSum));
      EXPECT_FLOAT_EQ(v[0], static_cast<float>(1 + 2 * k));
    }
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 0.9);
    EXPECT_EQ(e.stats().posted_allreduces, 0u);
  });
}

TEST(PostedCollectives, NamesBeyondAFullBoardAreNegotiated) {
  // 4 KiB tensors fill each rank's 1 MiB pool after 256 names (transport/shm/shm_layout.h).
  EngineRanks ranks(2, engineTestParams());
  ranks.run([&](int r, Engine& e) {
    constexpr int kNames = 300;
    std::vector<std::vector<float>> bufs(
        kNames, std::vector<float>(PostedCollectives::kMaxBytes / sizeof(float)));
    // Round 0 sees each name once, round 1 gives slots while the pool lasts, round 2 posts.
    for (int k = 0; k < 3; ++k) {
      for (int i = 0; i < kNames; ++i) {
        std::fill(bufs[i].begin(), bufs[i].end(), static_cast<float>(r + i));
        auto& b = bufs[i];
        expectOk(e, e.allreduce("full." + std::to_string(i),
                                {arg(b.data(), {static_cast<int64_t>(b.size())})}, {b.data()},
                                ReduceOp::kSum));
        ASSERT_FLOAT_EQ(b.back(), static_cast<float>(1 + 2 * i)) << "name " << i << " round " << k;
      }
    }
    EXPECT_EQ(e.stats().posted_allreduces, 256u);
  });
}

TEST(PostedCollectives, NamesUsedOnceTakeNoSlot) {
  // Unnamed ops get a fresh name per call (allreduce.noname.N): they must not use up the board
  // (4096 slots) and leave the model's own names negotiated.
  EngineRanks ranks(2, engineTestParams());
  ranks.run([&](int r, Engine& e) {
    std::vector<float> v(4);
    for (int i = 0; i < 5000; ++i) {
      std::fill(v.begin(), v.end(), static_cast<float>(r + i));
      expectOk(e, e.allreduce("noname." + std::to_string(i), {arg(v.data(), {4})}, {v.data()},
                              ReduceOp::kSum));
      ASSERT_FLOAT_EQ(v[0], static_cast<float>(1 + 2 * i)) << "name " << i;
    }
    EXPECT_EQ(e.stats().posted_allreduces, 0u);
    for (int k = 0; k < 3; ++k)
      expectOk(e, e.allreduce("model.w", {arg(v.data(), {4})}, {v.data()}, ReduceOp::kSum));
    EXPECT_EQ(e.stats().posted_allreduces, 1u);
  });
}

TEST(PostedCollectives, OnlyRunsThatCouldBePostedCountAsSightings) {
  // A name's runs too large to post do not enter the table of names seen once (they would take
  // places and evict first sightings of names that can be posted at every step): a name whose
  // tensor shrinks to a postable size gets its slot at its second small run, its third posts.
  EngineRanks ranks(2, engineTestParams());
  ranks.run([&](int r, Engine& e) {
    std::vector<float> large(PostedCollectives::kMaxBytes / sizeof(float) + 1, 1.0f),
        small(4, 1.0f);
    expectOk(e, e.allreduce("shrinks", {arg(large.data(), {static_cast<int64_t>(large.size())})},
                            {large.data()}, ReduceOp::kSum));
    for (int k = 0; k < 2; ++k) {
      expectOk(e, e.allreduce("shrinks", {arg(small.data(), {4})}, {small.data()}, ReduceOp::kSum));
    }
    EXPECT_EQ(e.stats().posted_allreduces, 0u) << "the large run counted as a first sighting";
    expectOk(e, e.allreduce("shrinks", {arg(small.data(), {4})}, {small.data()}, ReduceOp::kSum));
    EXPECT_EQ(e.stats().posted_allreduces, 1u);
    EXPECT_FLOAT_EQ(small[0], 8.0f);  // 1, doubled by each of three runs
  });
}

TEST(PostedCollectives, ANameThatKeepsFallingBackStaysNegotiatedAfterItsLastSlot) {
  EngineRanks ranks(2, engineTestParams());
  ranks.run([&](int r, Engine& e) {
    std::vector<float> v(8, 1.0f);
    for (int round = 0; round < 6; ++round) {
      // Negotiated (the name gets a slot while it has had fewer than the limit), posted, then
      // a shape mismatch on rank 1 revokes the slot. Round 0's first run only sees the name,
      // so its slot comes at the second and is revoked before a post: one post fewer.
      for (int k = 0; k < 2; ++k)
        expectOk(e, e.allreduce("flaky", {arg(v.data(), {4})}, {v.data()}, ReduceOp::kMax));
      auto h = e.allreduce("flaky", {arg(v.data(), {r == 1 ? 8 : 4})}, {v.data()}, ReduceOp::kMax);
      EXPECT_EQ(waitFor(e, h), StatusCode::kMismatch);
    }
    EXPECT_EQ(e.stats().posted_allreduces,
              static_cast<uint64_t>(PostedCollectives::kMaxSlotsPerName - 1));
  });
}

}  // namespace
}  // namespace perseus::engine
