// Adasum (Note [Adasum]) over ranks as threads, against a direct evaluation of Horovod's
// formula in double: the binary tree adasum(adasum(g0, g1), adasum(g2, g3)) of
//   adasum(a, b) = (1 - a.b / (2|a|^2)) a + (1 - a.b / (2|b|^2)) b.
// Every rank must get the same bits; a size that is not a power of two, or an integer dtype,
// is refused before any data moves.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "collectives/collectives.h"
#include "common/status.h"
#include "kernels/reduce.h"
#include "support/inproc_world.h"

namespace perseus::collectives {
namespace {

using Vec = std::vector<double>;

// Rank r's gradient: random, of a scale that differs per rank; rank 1 sends zeros when
// `zero_one` (its coefficient must stay 1: squared norm below 1e-8).
Vec gradient(int rank, size_t count, bool zero_one) {
  std::mt19937 rng(static_cast<unsigned>(1000 + rank));
  std::normal_distribution<double> normal(0.0, 1.0 + rank);
  Vec v(count);
  for (double& x : v) x = (zero_one && rank == 1) ? 0.0 : normal(rng);
  return v;
}

Vec combine(const Vec& a, const Vec& b) {
  double dot = 0, na = 0, nb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    dot += a[i] * b[i];
    na += a[i] * a[i];
    nb += b[i] * b[i];
  }
  const double ca = na >= 1e-8 ? 1 - dot / na * 0.5 : 1, cb = nb >= 1e-8 ? 1 - dot / nb * 0.5 : 1;
  Vec out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = ca * a[i] + cb * b[i];
  return out;
}

Vec reference(int size, size_t count, bool zero_one) {
  std::vector<Vec> level;
  for (int r = 0; r < size; ++r) level.push_back(gradient(r, count, zero_one));
  while (level.size() > 1) {
    std::vector<Vec> next;
    for (size_t i = 0; i < level.size(); i += 2) next.push_back(combine(level[i], level[i + 1]));
    level = std::move(next);
  }
  return level[0];
}

std::vector<unsigned char> encode(const Vec& v, DataType t) {
  std::vector<unsigned char> out(v.size() * dataTypeSize(t));
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == DataType::kFloat64) {
      std::memcpy(&out[i * 8], &v[i], 8);
    } else if (t == DataType::kFloat32) {
      const float f = static_cast<float>(v[i]);
      std::memcpy(&out[i * 4], &f, 4);
    } else {
      const uint16_t h = kernels::floatToHalf(static_cast<float>(v[i]));
      std::memcpy(&out[i * 2], &h, 2);
    }
  }
  return out;
}

double decode(const std::vector<unsigned char>& b, size_t i, DataType t) {
  if (t == DataType::kFloat64) {
    double d;
    std::memcpy(&d, &b[i * 8], 8);
    return d;
  }
  if (t == DataType::kFloat32) {
    float f;
    std::memcpy(&f, &b[i * 4], 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, &b[i * 2], 2);
  return kernels::halfToFloat(h);
}

class CollectivesAdasum : public ::testing::TestWithParam<int> {};

TEST_P(CollectivesAdasum, MatchesTheFormulaWithTheSameBitsOnEveryRank) {
  const int size = GetParam();
  testing::InProcWorldOptions o;
  o.size = size;
  testing::InProcWorld world(o);
  std::vector<std::vector<unsigned char>> results(static_cast<size_t>(size));
  for (DataType t : {DataType::kFloat64, DataType::kFloat32, DataType::kFloat16}) {
    const double tolerance = t == DataType::kFloat64   ? 1e-12
                             : t == DataType::kFloat32 ? 1e-5
                                                       : 2e-2;
    for (size_t count : {size_t{1}, size_t{3}, size_t{1000}, size_t{4099}}) {
      for (bool zero_one : {false, true}) {
        world.runOk([&](int rank) {
          auto comm = world.makeWorldComm(rank);
          auto data = encode(gradient(rank, count, zero_one), t);
          allreduce(*comm, data.data(), data.data(), count, t, ReduceOp::kAdasum);
          results[static_cast<size_t>(rank)] = data;
        });
        const Vec want = reference(size, count, zero_one);
        double scale = 0;
        for (double x : want) scale = std::max(scale, std::fabs(x));
        for (size_t i = 0; i < count; ++i) {
          ASSERT_NEAR(decode(results[0], i, t), want[i], tolerance * std::max(1.0, scale))
              << dataTypeName(t) << " count " << count << " element " << i;
        }
        for (int r = 1; r < size; ++r) {
          EXPECT_EQ(results[static_cast<size_t>(r)], results[0]) << "rank " << r;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, CollectivesAdasum, ::testing::Values(1, 2, 4, 8));

TEST(CollectivesAdasumRefusals, NonPowerOfTwoRanksAndIntegerTensors) {
  testing::InProcWorldOptions o;
  o.size = 3;
  testing::InProcWorld world(o);
  world.runOk([&](int rank) {
    auto comm = world.makeWorldComm(rank);
    float x[4] = {1, 2, 3, 4};
    try {
      allreduce(*comm, x, x, 4, DataType::kFloat32, ReduceOp::kAdasum);
      throw std::runtime_error("3 ranks: no error");
    } catch (const UnsupportedError& e) {
      if (std::string(e.what()).find("non-power-of-two ranks is not supported") ==
          std::string::npos) {
        throw std::runtime_error(e.what());
      }
    }
  });
  o.size = 2;
  testing::InProcWorld pair(o);
  pair.runOk([&](int rank) {
    auto comm = pair.makeWorldComm(rank);
    int32_t x[2] = {1, 2};
    try {
      allreduce(*comm, x, x, 2, DataType::kInt32, ReduceOp::kAdasum);
      throw std::runtime_error("int32: no error");
    } catch (const UnsupportedError&) {
    }
  });
}

}  // namespace
}  // namespace perseus::collectives
