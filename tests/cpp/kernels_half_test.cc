// Conversions of float16/bfloat16 against references written independently of the kernels:
// every half/bfloat16 value exhaustively, and every float rounding case (each half interval's
// endpoints, midpoints and their neighbours) plus a dense stride over all 2^32 bit patterns.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/reduce.h"

namespace perseus::kernels {
namespace {

uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float fromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Reference half -> double from the definition: (-1)^s * 2^(e-15) * (1 + m/1024).
double refHalfValue(uint16_t h) {
  int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  return s ? -v : v;
}

// The positive finite halves in increasing order are exactly bit patterns 0 .. 0x7bff.
// Reference float -> half: the nearest of them, ties to the even pattern, beyond 65520: Inf.
uint16_t refFloatToHalf(float f) {
  uint32_t u = bitsOf(f);
  uint16_t sign = (u >> 16) & 0x8000;
  if (std::isnan(f)) return 0;  // NaN handled separately by the caller
  double a = std::fabs(static_cast<double>(f));
  if (a >= 65520.0) return sign | 0x7c00;
  uint16_t lo = 0, hi = 0x7bff;
  while (lo < hi) {  // first pattern whose value >= a
    uint16_t mid = static_cast<uint16_t>((lo + hi) / 2);
    if (refHalfValue(mid) >= a)
      hi = mid;
    else
      lo = static_cast<uint16_t>(mid + 1);
  }
  uint16_t up = lo;
  if (refHalfValue(up) == a || up == 0) return sign | up;
  uint16_t down = static_cast<uint16_t>(up - 1);
  double du = refHalfValue(up) - a, dd = a - refHalfValue(down);
  uint16_t pick = du < dd ? up : dd < du ? down : ((up & 1) == 0 ? up : down);
  return sign | pick;
}

TEST(KernelsHalf, EveryHalfWidensExactly) {
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> wide(65536);
  halfToFloatArray(wide.data(), all.data(), all.size());
  for (uint32_t i = 0; i < 65536; ++i) {
    uint16_t h = static_cast<uint16_t>(i);
    float f = halfToFloat(h);
    ASSERT_EQ(bitsOf(f), bitsOf(wide[i])) << "array vs scalar at 0x" << std::hex << i;
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << i;
      ASSERT_EQ(floatToHalf(f), h | 0x200) << "NaN payload round trip 0x" << std::hex << i;
    } else if ((h & 0x7fff) == 0x7c00) {
      ASSERT_TRUE(std::isinf(f));
      ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0);
    } else {
      ASSERT_EQ(static_cast<double>(f), refHalfValue(h)) << std::hex << i;
      ASSERT_EQ(floatToHalf(f), h) << "round trip 0x" << std::hex << i;
    }
  }
}

void checkFloats(const std::vector<float>& in) {
  std::vector<uint16_t> arr(in.size());
  floatToHalfArray(arr.data(), in.data(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    float f = in[i];
    uint16_t s = floatToHalf(f);
    ASSERT_EQ(s, arr[i]) << "scalar vs array for float bits 0x" << std::hex << bitsOf(f);
    if (std::isnan(f)) {
      ASSERT_EQ(s & 0x7e00, 0x7e00) << "NaN must stay a quiet NaN";
      continue;
    }
    ASSERT_EQ(s, refFloatToHalf(f)) << "float bits 0x" << std::hex << bitsOf(f);
  }
}

TEST(KernelsHalf, RoundingAtEveryHalfInterval) {
  std::vector<float> in;
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    double v = refHalfValue(static_cast<uint16_t>(h));
    double next = h + 1 < 0x7c00 ? refHalfValue(static_cast<uint16_t>(h + 1)) : 65536.0;
    float mid = static_cast<float>((v + next) / 2);  // exact: halves have 11 significant bits
    for (float c : {static_cast<float>(v), mid}) {
      for (float x : {std::nextafter(c, 0.0f), c, std::nextafter(c, 1e30f)}) {
        in.push_back(x);
        in.push_back(-x);
      }
    }
  }
  checkFloats(in);
}

TEST(KernelsHalf, StrideOverAllFloatBitPatterns) {
  std::vector<float> in;
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 4099)
    in.push_back(fromBits(static_cast<uint32_t>(u)));
  checkFloats(in);
}

uint16_t refFloatToBf16(float f) {
  // Round the double value to 8 significant bits by hand: keep the top 16 bits and compare
  // the dropped 16 with one half of the last kept unit.
  uint32_t u = bitsOf(f);
  uint32_t keep = u >> 16, drop = u & 0xffff;
  if (drop > 0x8000 || (drop == 0x8000 && (keep & 1))) ++keep;
  return static_cast<uint16_t>(keep);
}

TEST(KernelsBfloat16, ExhaustiveWidenAndRoundingCases) {
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> wide(65536);
  bfloat16ToFloatArray(wide.data(), all.data(), all.size());
  std::vector<float> in;
  for (uint32_t i = 0; i < 65536; ++i) {
    ASSERT_EQ(bitsOf(wide[i]), i << 16);
    ASSERT_EQ(bitsOf(bfloat16ToFloat(static_cast<uint16_t>(i))), i << 16);
    for (uint32_t low : {0u, 1u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu})
      in.push_back(fromBits((i << 16) | low));
  }
  std::vector<uint16_t> out(in.size());
  floatToBfloat16Array(out.data(), in.data(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    uint16_t s = floatToBfloat16(in[i]);
    ASSERT_EQ(s, out[i]) << std::hex << bitsOf(in[i]);
    if (std::isnan(in[i])) {
      ASSERT_TRUE(std::isnan(bfloat16ToFloat(s))) << std::hex << bitsOf(in[i]);
    } else {
      ASSERT_EQ(s, refFloatToBf16(in[i])) << std::hex << bitsOf(in[i]);
    }
  }
}

}  // namespace
}  // namespace perseus::kernels
