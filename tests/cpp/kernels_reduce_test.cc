// reduceInto / reduce2 / reduceN / scale / hasNonFinite for every dtype and op, against a
// scalar reference that goes through double (or float32 for the half types).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/reduce.h"

namespace perseus::kernels {
namespace {

constexpr DataType kTypes[] = {DataType::kUInt8,   DataType::kInt8,    DataType::kInt32,
                               DataType::kInt64,   DataType::kFloat16, DataType::kBFloat16,
                               DataType::kFloat32, DataType::kFloat64, DataType::kBool};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct};

// Element i of a typed buffer as a double, and back (with the type's wrap/rounding).
double get(const std::vector<unsigned char>& buf, size_t i, DataType t) {
  const unsigned char* p = buf.data() + i * dataTypeSize(t);
  switch (t) {
    case DataType::kUInt8:
      return *p;
    case DataType::kBool:
      return *p != 0;
    case DataType::kInt8: {
      int8_t v;
      std::memcpy(&v, p, 1);
      return v;
    }
    case DataType::kInt32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DataType::kInt64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return static_cast<double>(v);
    }
    case DataType::kFloat16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return halfToFloat(v);
    }
    case DataType::kBFloat16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return bfloat16ToFloat(v);
    }
    case DataType::kFloat32: {
      float v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DataType::kFloat64: {
      double v;
      std::memcpy(&v, p, 8);
      return v;
    }
  }
  return 0;
}

void put(std::vector<unsigned char>& buf, size_t i, DataType t, double x) {
  unsigned char* p = buf.data() + i * dataTypeSize(t);
  switch (t) {
    case DataType::kUInt8:
      *p = static_cast<uint8_t>(static_cast<int64_t>(x));
      return;
    case DataType::kBool:
      *p = x != 0;
      return;
    case DataType::kInt8: {
      int8_t v = static_cast<int8_t>(static_cast<int64_t>(x));
      std::memcpy(p, &v, 1);
      return;
    }
    case DataType::kInt32: {
      int32_t v = static_cast<int32_t>(static_cast<int64_t>(x));
      std::memcpy(p, &v, 4);
      return;
    }
    case DataType::kInt64: {
      int64_t v = static_cast<int64_t>(x);
      std::memcpy(p, &v, 8);
      return;
    }
    case DataType::kFloat16: {
      uint16_t v = floatToHalf(static_cast<float>(x));
      std::memcpy(p, &v, 2);
      return;
    }
    case DataType::kBFloat16: {
      uint16_t v = floatToBfloat16(static_cast<float>(x));
      std::memcpy(p, &v, 2);
      return;
    }
    case DataType::kFloat32: {
      float v = static_cast<float>(x);
      std::memcpy(p, &v, 4);
      return;
    }
    case DataType::kFloat64:
      std::memcpy(p, &x, 8);
      return;
  }
}

// Values small enough that sums and products of a few stay exact in every type (except the
// 8-bit ones, where the reference wraps the same way).
std::vector<unsigned char> randomBuffer(size_t n, DataType t, std::mt19937& rng) {
  std::vector<unsigned char> buf(n * dataTypeSize(t));
  std::uniform_int_distribution<int> dist(-6, 6);
  for (size_t i = 0; i < n; ++i) {
    int v = dist(rng);
    if (t == DataType::kUInt8 || t == DataType::kBool)
      v = std::abs(v) % (t == DataType::kBool ? 2 : 7);
    double x = isFloatingPoint(t) ? v * 0.5 : v;
    put(buf, i, t, x);
  }
  return buf;
}

double refCombine(double a, double b, ReduceOp op, DataType t) {
  if (t == DataType::kBool) {
    bool x = a != 0, y = b != 0;
    return (op == ReduceOp::kSum || op == ReduceOp::kMax) ? (x || y) : (x && y);
  }
  switch (op) {
    case ReduceOp::kSum:
      return a + b;
    case ReduceOp::kProduct:
      return a * b;
    case ReduceOp::kMin:
      return std::min(a, b);
    case ReduceOp::kMax:
      return std::max(a, b);
    default:
      return 0;
  }
}

class KernelsReduce : public ::testing::TestWithParam<std::tuple<DataType, ReduceOp>> {};

TEST_P(KernelsReduce, AllShapesMatchReference) {
  auto [t, op] = GetParam();
  std::mt19937 rng(42);
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{33}, size_t{1000}, size_t{4099}}) {
    auto a = randomBuffer(n, t, rng), b = randomBuffer(n, t, rng), c = randomBuffer(n, t, rng);
    std::vector<unsigned char> want2(a.size()), want3(a.size());
    for (size_t i = 0; i < n; ++i) {
      double ab = refCombine(get(a, i, t), get(b, i, t), op, t);
      put(want2, i, t, ab);
      put(want3, i, t, refCombine(ab, get(c, i, t), op, t));
    }
    std::vector<unsigned char> out(a.size());
    reduce2(out.data(), a.data(), b.data(), n, t, op);
    ASSERT_EQ(out, want2) << dataTypeName(t) << " " << reduceOpName(op) << " n=" << n;
    auto acc = a;
    reduceInto(acc.data(), b.data(), n, t, op);
    ASSERT_EQ(acc, want2) << "reduceInto";
    auto bb = b;
    reduce2(bb.data(), a.data(), bb.data(), n, t, op);
    ASSERT_EQ(bb, want2) << "reduce2 out == b";
    const void* srcs[] = {a.data(), b.data(), c.data()};
    reduceN(out.data(), srcs, 3, n, t, op);
    ASSERT_EQ(out, want3) << "reduceN";
    auto cc = c;
    const void* aliased[] = {a.data(), b.data(), cc.data()};
    reduceN(cc.data(), aliased, 3, n, t, op);
    ASSERT_EQ(cc, want3) << "reduceN with out == srcs[2]";
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypesAndOps, KernelsReduce,
                         ::testing::Combine(::testing::ValuesIn(kTypes), ::testing::ValuesIn(kOps)),
                         [](const auto& info) {
                           return std::string(dataTypeName(std::get<0>(info.param))) + "_" +
                                  reduceOpName(std::get<1>(info.param));
                         });

TEST(KernelsReduceSemantics, IntegersWrapAndFloatsPropagateNaN) {
  int32_t a = std::numeric_limits<int32_t>::max(), b = 1, out = 0;
  reduce2(&out, &a, &b, 1, DataType::kInt32, ReduceOp::kSum);
  EXPECT_EQ(out, std::numeric_limits<int32_t>::min());
  float nan = std::numeric_limits<float>::quiet_NaN(), one = 1.0f, r = 0;
  for (ReduceOp op : {ReduceOp::kMin, ReduceOp::kMax}) {
    reduce2(&r, &nan, &one, 1, DataType::kFloat32, op);
    EXPECT_TRUE(std::isnan(r));
    reduce2(&r, &one, &nan, 1, DataType::kFloat32, op);
    EXPECT_TRUE(std::isnan(r));
  }
  EXPECT_THROW(reduceInto(&r, &one, 1, DataType::kFloat32, ReduceOp::kAverage), std::exception);
}

TEST(KernelsReduceSemantics, HalfTypesAccumulateInFloatAndRoundOnce) {
  // 2048 + 1 + 1 in fp16: rounding after each step gives 2048 (ties to even), rounding once
  // gives 2050.
  uint16_t x = floatToHalf(2048.0f), y = floatToHalf(1.0f), out = 0;
  const void* srcs[] = {&x, &y, &y};
  reduceN(&out, srcs, 3, 1, DataType::kFloat16, ReduceOp::kSum);
  EXPECT_EQ(halfToFloat(out), 2050.0f);
}

TEST(KernelsScale, EveryTypeInPlaceAndCopy) {
  std::mt19937 rng(7);
  for (DataType t : kTypes) {
    auto a = randomBuffer(1001, t, rng);
    std::vector<unsigned char> want(a.size()), out(a.size());
    for (size_t i = 0; i < 1001; ++i) {
      double v = get(a, i, t) * 0.5;
      if (t == DataType::kBool)
        v = get(a, i, t);
      else if (!isFloatingPoint(t))
        v = std::trunc(v);
      put(want, i, t, v);
    }
    scaleCopy(out.data(), a.data(), 1001, t, 0.5);
    EXPECT_EQ(out, want) << dataTypeName(t);
    scale(a.data(), 1001, t, 0.5);
    EXPECT_EQ(a, want) << dataTypeName(t);
  }
  int8_t big = 100;
  scale(&big, 1, DataType::kInt8, 3.0);
  EXPECT_EQ(big, 127) << "integers saturate";
}

TEST(KernelsScale, GpuFactorRoundsToFloat16OnlyForFloat16) {
  // 1/3 is not a float16: on a GPU a float16 tensor is scaled by the nearest float16,
  // 0.333251953125, in float16 arithmetic (Horovod's CUDA kernel), which differs from
  // scaling in float32 by 1/3 for 5.0: 1.666015625 against 1.6669921875.
  EXPECT_EQ(gpuScaleFactor(DataType::kFloat16, 1.0 / 3), 0.333251953125);
  EXPECT_EQ(gpuScaleFactor(DataType::kFloat16, 0.5), 0.5);
  for (DataType t : {DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64, DataType::kInt32,
                     DataType::kInt64, DataType::kUInt8})
    EXPECT_EQ(gpuScaleFactor(t, 1.0 / 3), 1.0 / 3) << dataTypeName(t);
  uint16_t x = floatToHalf(5.0f);
  scale(&x, 1, DataType::kFloat16, gpuScaleFactor(DataType::kFloat16, 1.0 / 3));
  EXPECT_EQ(halfToFloat(x), 1.666015625f);
  x = floatToHalf(5.0f);
  scale(&x, 1, DataType::kFloat16, 1.0 / 3);
  EXPECT_EQ(halfToFloat(x), 1.6669921875f) << "float16 on the CPU is scaled in float32";
  int32_t i = -7;
  scale(&i, 1, DataType::kInt32, 1.0 / 3);
  EXPECT_EQ(i, -2) << "integers: float64, truncated toward zero";
}

TEST(KernelsNonFinite, DetectsNaNAndInfOnlyInFloatTypes) {
  for (DataType t :
       {DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64}) {
    std::vector<unsigned char> buf(5000 * dataTypeSize(t));
    for (size_t i = 0; i < 5000; ++i) put(buf, i, t, 1.5);
    EXPECT_FALSE(hasNonFinite(buf.data(), 5000, t));
    put(buf, 4321, t, std::numeric_limits<double>::infinity());
    EXPECT_TRUE(hasNonFinite(buf.data(), 5000, t)) << dataTypeName(t);
    put(buf, 4321, t, std::nan(""));
    EXPECT_TRUE(hasNonFinite(buf.data(), 5000, t)) << dataTypeName(t);
  }
  int32_t ints[3] = {-1, -1, -1};
  EXPECT_FALSE(hasNonFinite(ints, 3, DataType::kInt32));
}

TEST(KernelsCopy, StreamingCopyMatchesMemcpy) {
  for (size_t n : {size_t{0}, size_t{5}, size_t{300000}, size_t{1} << 20}) {
    std::vector<unsigned char> src(n + 3), dst(n + 3, 0);
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 31);
    copyStreaming(dst.data() + 1, src.data() + 3, n);
    EXPECT_EQ(0, std::memcmp(dst.data() + 1, src.data() + 3, n));
  }
}

}  // namespace
}  // namespace perseus::kernels
