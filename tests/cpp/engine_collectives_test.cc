// Every collective through real engines: ranks as threads, each with its own Engine over a
// shared-memory transport.
#include <gtest/gtest.h>

#include <numeric>
#include <stdexcept>

#include "support/engine_ranks.h"

namespace perseus::engine {
namespace {

using testing::EngineRanks;
using testing::engineTestParams;

constexpr double kWait = 20.0;

// Throws (rather than ASSERT) so that a rank thread stops before its buffers go away while the
// engine may still write them; EngineRanks::run rethrows into the test.
void expectOk(const std::shared_ptr<Handle>& h) {
  if (!h->wait(kWait)) throw std::runtime_error("handle '" + h->name() + "' did not complete");
  if (h->status() != StatusCode::kOk) throw std::runtime_error(h->name() + ": " + h->message());
}

TensorArg arg(const void* data, std::vector<int64_t> shape, DataType t = DataType::kFloat32) {
  return TensorArg{data, t, std::move(shape), -1};
}

class EngineCollectives : public ::testing::TestWithParam<int> {};

TEST_P(EngineCollectives, AllreduceSumAverageScalesAndInPlace) {
  const int n = GetParam();
  EngineRanks ranks(n, engineTestParams());
  ranks.run([&](int r, Engine& e) {
    for (int iter = 0; iter < 3; ++iter) {  // later iterations hit the response cache
      std::vector<float> in(37), out(37);
      for (int i = 0; i < 37; ++i) in[i] = float(r + i);
      expectOk(e.allreduce("sum", {arg(in.data(), {37})}, {out.data()}, ReduceOp::kSum));
      float base = float(n * (n - 1)) / 2;
      for (int i = 0; i < 37; ++i) ASSERT_FLOAT_EQ(out[i], base + n * i);
      expectOk(
          e.allreduce("avg", {arg(in.data(), {37})}, {in.data()}, ReduceOp::kAverage, 2.0, 0.5));
      for (int i = 0; i < 37; ++i) ASSERT_FLOAT_EQ(in[i], (base + n * i) / n);
      int64_t x = r + 1, y = 0;
      expectOk(e.allreduce("max", {arg(&x, {}, DataType::kInt64)}, {&y}, ReduceOp::kMax));
      ASSERT_EQ(y, n);
    }
  });
}

TEST_P(EngineCollectives, ManySmallTensorsFuseAndGroupedAllreduce) {
  const int n = GetParam();
  EngineRanks ranks(n, engineTestParams());
  ranks.run([&](int r, Engine& e) {
    for (int iter = 0; iter < 2; ++iter) {
      std::vector<std::vector<double>> bufs(20);
      std::vector<std::shared_ptr<Handle>> hs;
      for (int t = 0; t < 20; ++t) {
        bufs[t].assign(t + 1, r + t);
        hs.push_back(e.allreduce("t" + std::to_string(t),
                                 {arg(bufs[t].data(), {t + 1}, DataType::kFloat64)},
                                 {bufs[t].data()}, ReduceOp::kSum));
      }
      for (auto& h : hs) expectOk(h);
      for (int t = 0; t < 20; ++t) {
        for (double v : bufs[t]) ASSERT_DOUBLE_EQ(v, n * (n - 1) / 2.0 + n * t);
      }
      std::vector<float> a(5, 1.0f), b(3, 2.0f);
      std::vector<int32_t> c(2, r);
      expectOk(e.allreduce(
          "group", {arg(a.data(), {5}), arg(b.data(), {3}), arg(c.data(), {2}, DataType::kInt32)},
          {a.data(), b.data(), c.data()}, ReduceOp::kSum));
      ASSERT_FLOAT_EQ(a[4], float(n));
      ASSERT_FLOAT_EQ(b[0], 2.0f * n);
      ASSERT_EQ(c[1], n * (n - 1) / 2);
    }
  });
}

// Note [Cache-sized pieces] (fusion/cpu_pieces.h): a fused group larger than a piece, tensors
// larger than a piece (run alone, themselves in pieces, one of them not a multiple of one)
// and small ones between them, with prescale and Average's postscale.
TEST_P(EngineCollectives, LargeFusedGroupRunsInPieces) {
  const int n = GetParam();
  const std::vector<int64_t> sizes = {300000, 1200001, 5,  10000, 12000, 9000,
                                      700000, 2100000, 17, 16384, 16385};
  EngineRanks ranks(n, engineTestParams());
  ranks.run([&](int r, Engine& e) {
    for (int iter = 0; iter < 2; ++iter) {
      std::vector<std::vector<float>> bufs(sizes.size());
      std::vector<std::shared_ptr<Handle>> hs;
      for (size_t t = 0; t < sizes.size(); ++t) {
        bufs[t].resize(sizes[t]);
        for (int64_t i = 0; i < sizes[t]; ++i) bufs[t][i] = float((i + r + int64_t(t)) % 7);
        hs.push_back(e.allreduce("piece" + std::to_string(t), {arg(bufs[t].data(), {sizes[t]})},
                                 {bufs[t].data()}, ReduceOp::kAverage, 2.0, 0.5));
      }
      for (auto& h : hs) expectOk(h);
      for (size_t t = 0; t < sizes.size(); ++t) {
        for (int64_t i = 0; i < sizes[t]; ++i) {
          float sum = 0;
          for (int q = 0; q < n; ++q) sum += float((i + q + int64_t(t)) % 7);
          ASSERT_FLOAT_EQ(bufs[t][i], sum / n) << "tensor " << t << " element " << i;
        }
      }
    }
  });
}

TEST_P(EngineCollectives, AllgatherWithDifferentFirstDims) {
  const int n = GetParam();
  EngineRanks ranks(n, engineTestParams());
  ranks.run([&](int r, Engine& e) {
    for (int iter = 0; iter < 2; ++iter) {
      std::vector<int32_t> in((r + 1) * 2, r);
      std::vector<float> other(3, float(r));
      auto h = e.allgather(
          "ag", {arg(in.data(), {r + 1, 2}, DataType::kInt32), arg(other.data(), {1, 3})});
      expectOk(h);
      const auto& outs = h->outputs();
      ASSERT_EQ(outs.size(), 2u);
      int64_t rows = n * (n + 1) / 2;
      ASSERT_EQ(outs[0].shape, (std::vector<int64_t>{rows, 2}));
      auto* p = reinterpret_cast<const int32_t*>(outs[0].data.get());
      int k = 0;
      for (int q = 0; q < n; ++q) {
        for (int i = 0; i < (q + 1) * 2; ++i) ASSERT_EQ(p[k++], q);
      }
      ASSERT_EQ(outs[1].shape, (std::vector<int64_t>{n, 3}));
      auto* f = reinterpret_cast<const float*>(outs[1].data.get());
      for (int q = 0; q < n; ++q) ASSERT_FLOAT_EQ(f[q * 3 + 2], float(q));
    }
  });
}

TEST_P(EngineCollectives, BroadcastFromEveryRoot) {
  const int n = GetParam();
  EngineRanks ranks(n, engineTestParams());
  ranks.run([&](int r, Engine& e) {
    for (int root = 0; root < n; ++root) {
      std::vector<int64_t> in(10, r == root ? 42 + root : -1), out(10, 0);
      std::vector<int64_t> small(2, r == root ? 7 : 0);
      auto h1 = e.broadcast("b" + std::to_string(root), arg(in.data(), {10}, DataType::kInt64),
                            out.data(), root);
      auto h2 = e.broadcast("s" + std::to_string(root), arg(small.data(), {2}, DataType::kInt64),
                            small.data(), root);
      expectOk(h1);
      expectOk(h2);
      for (int64_t v : out) ASSERT_EQ(v, 42 + root);
      ASSERT_EQ(small[1], 7);
    }
  });
}

TEST_P(EngineCollectives, AlltoallEvenAndWithSplits) {
  const int n = GetParam();
  EngineRanks ranks(n, engineTestParams());
  ranks.run([&](int r, Engine& e) {
    std::vector<float> in(n * 2);
    for (int i = 0; i < n * 2; ++i) in[i] = float(r * 100 + i);
    auto h = e.alltoall("even", arg(in.data(), {n * 2}), {});
    expectOk(h);
    const float* out = reinterpret_cast<const float*>(h->outputs()[0].data.get());
    for (int q = 0; q < n; ++q) {
      ASSERT_FLOAT_EQ(out[q * 2], float(q * 100 + r * 2));
    }
    // Rank r sends q+1 rows to rank q.
    std::vector<int64_t> splits(n);
    for (int q = 0; q < n; ++q) splits[q] = q + 1;
    int64_t rows = n * (n + 1) / 2;
    std::vector<int32_t> data(rows * 3, r);
    auto h2 = e.alltoall("splits", arg(data.data(), {rows, 3}, DataType::kInt32), splits);
    expectOk(h2);
    ASSERT_EQ(h2->outputs()[0].shape, (std::vector<int64_t>{int64_t(n) * (r + 1), 3}));
    ASSERT_EQ(h2->receivedSplits(), std::vector<int64_t>(n, r + 1));
  });
}

TEST_P(EngineCollectives, ReducescatterUnevenAndFused) {
  const int n = GetParam();
  EngineRanks ranks(n, engineTestParams());
  ranks.run([&](int r, Engine& e) {
    for (int iter = 0; iter < 2; ++iter) {
      const int64_t rows = 2 * n + 1;  // the first rank gets one more row
      std::vector<float> a(rows * 2), b(n * 3, 1.0f);
      for (int64_t i = 0; i < rows * 2; ++i) a[i] = float(i);
      auto h = e.reducescatter("rs", {arg(a.data(), {rows, 2}), arg(b.data(), {n, 3})},
                               ReduceOp::kAverage, 1.0, 3.0);
      expectOk(h);
      const auto& outs = h->outputs();
      int64_t mine = rows / n + (r < rows % n ? 1 : 0);
      ASSERT_EQ(outs[0].shape, (std::vector<int64_t>{mine, 2}));
      int64_t first = 0;
      for (int q = 0; q < r; ++q) first += rows / n + (q < rows % n ? 1 : 0);
      const float* p = reinterpret_cast<const float*>(outs[0].data.get());
      for (int64_t i = 0; i < mine * 2; ++i) ASSERT_FLOAT_EQ(p[i], 3.0f * float(first * 2 + i));
      const float* pb = reinterpret_cast<const float*>(outs[1].data.get());
      ASSERT_EQ(outs[1].shape, (std::vector<int64_t>{1, 3}));
      ASSERT_FLOAT_EQ(pb[2], 3.0f);
    }
  });
}

// Note [Allgather into]: the engine writes into the caller's buffers; a rank whose allgather
// input differs fails its own entry without stalling the others.
TEST_P(EngineCollectives, AllgatherAndReducescatterIntoCallerBuffers) {
  const int n = GetParam();
  EngineRanks ranks(n, engineTestParams());
  ranks.run([&](int r, Engine& e) {
    for (int iter = 0; iter < 3; ++iter) {  // the later ones may be posted
      std::vector<float> in(4, float(r + 1)), out(4 * n, -1.0f);
      void* out_ptr = out.data();
      expectOk(e.allgather("agi", {arg(in.data(), {2, 2})}, 0, false, Span<void*>(&out_ptr, 1)));
      for (int q = 0; q < n; ++q) ASSERT_FLOAT_EQ(out[q * 4 + 3], float(q + 1));
      std::vector<float> rows(2 * n, 1.0f), block(2, -1.0f);
      void* block_ptr = block.data();
      expectOk(e.reducescatter("rsi", {arg(rows.data(), {2 * n})}, ReduceOp::kSum, 1.0, 1.0, 0,
                               false, Span<void*>(&block_ptr, 1)));
      ASSERT_FLOAT_EQ(block[1], float(n));
    }
    std::vector<float> in(r == 0 ? 1 : 2, 1.0f), out(in.size() * n, 0.0f);
    void* out_ptr = out.data();
    auto h = e.allgather("agi.sizes", {arg(in.data(), {int64_t(in.size())})}, 0, false,
                         Span<void*>(&out_ptr, 1));
    h->wait(-1);
    if (n > 1) {
      ASSERT_EQ(h->status(), StatusCode::kInvalidArgument);
      ASSERT_NE(h->message().find("same shape"), std::string::npos) << h->message();
    }
    std::vector<float> after(2, 1.0f);
    expectOk(e.allreduce("after", {arg(after.data(), {2})}, {after.data()}, ReduceOp::kSum));
  });
}

TEST_P(EngineCollectives, BarrierAndDifferentSubmissionOrders) {
  const int n = GetParam();
  EngineRanks ranks(n, engineTestParams());
  ranks.run([&](int r, Engine& e) {
    std::vector<std::vector<float>> bufs(8, std::vector<float>(4, 1.0f));
    std::vector<int> order(8);
    std::iota(order.begin(), order.end(), 0);
    if (r % 2 == 1) std::reverse(order.begin(), order.end());
    std::vector<std::shared_ptr<Handle>> hs(8);
    for (int t : order) {
      hs[t] = e.allreduce("o" + std::to_string(t), {arg(bufs[t].data(), {4})}, {bufs[t].data()},
                          ReduceOp::kSum);
    }
    for (auto& h : hs) expectOk(h);
    for (auto& b : bufs) ASSERT_FLOAT_EQ(b[3], float(n));
    expectOk(e.barrier());
    expectOk(e.barrier());
  });
}

INSTANTIATE_TEST_SUITE_P(Sizes, EngineCollectives, ::testing::Values(1, 2, 3, 4));

}  // namespace
}  // namespace perseus::engine
