// IEEE binary16 and bfloat16 <-> float32 conversions. The scalar versions are the reference;
// the array versions use F16C when the CPU has it (checked once at run time) and must give
// bit-identical results, including for NaN (quieted, payload truncated) and subnormals.
#include <immintrin.h>

#include <cstring>

#include "kernels/reduce.h"
#include "kernels/simd.h"

PERSEUS_KERNEL_OPTIMIZE

namespace perseus::kernels {
namespace {

uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

float bitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

__attribute__((target("avx2,f16c"))) void halfToFloatF16c(float* dst, const uint16_t* src,
                                                          size_t count) {
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  for (; i < count; ++i) dst[i] = halfToFloat(src[i]);
}

__attribute__((target("avx2,f16c"))) void floatToHalfF16c(uint16_t* dst, const float* src,
                                                          size_t count) {
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  for (; i < count; ++i) dst[i] = floatToHalf(src[i]);
}

}  // namespace

bool cpuHasF16c() {
  static const bool has = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx2");
  return has;
}

float halfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) {  // Inf, or NaN made quiet as F16C does
    return bitsFloat(sign | 0x7f800000u | (mant != 0 ? 0x400000u : 0u) | (mant << 13));
  }
  if (exp != 0) return bitsFloat(sign | ((exp + 112) << 23) | (mant << 13));
  if (mant == 0) return bitsFloat(sign);
  // Subnormal: shift the leading one up to the implicit position.
  uint32_t e = 113;
  while ((mant & 0x400u) == 0) {
    mant <<= 1;
    --e;
  }
  return bitsFloat(sign | (e << 23) | ((mant & 0x3ffu) << 13));
}

uint16_t floatToHalf(float f) {
  uint32_t u = floatBits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  u &= 0x7fffffffu;
  if (u >= 0x7f800000u) {  // Inf or NaN; NaN stays NaN (quiet bit set) as F16C does
    return static_cast<uint16_t>(sign |
                                 (u > 0x7f800000u ? 0x7e00u | ((u >> 13) & 0x3ffu) : 0x7c00u));
  }
  if (u >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to Inf
  if (u >= 0x38800000u) {                                              // normal half
    u += 0xfffu + ((u >> 13) & 1u);
    return static_cast<uint16_t>(sign | ((u >> 13) - (112u << 10)));
  }
  uint32_t e = u >> 23;
  if (e < 102) return static_cast<uint16_t>(sign);  // below half the smallest subnormal
  uint32_t m = (u & 0x7fffffu) | 0x800000u;
  uint32_t shift = 126 - e;  // 14..24
  uint32_t r = m >> shift;
  uint32_t rem = m & ((1u << shift) - 1);
  uint32_t halfway = 1u << (shift - 1);
  if (rem > halfway || (rem == halfway && (r & 1u))) ++r;
  return static_cast<uint16_t>(sign | r);
}

float bfloat16ToFloat(uint16_t b) { return bitsFloat(static_cast<uint32_t>(b) << 16); }

uint16_t floatToBfloat16(float f) {
  uint32_t u = floatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

void halfToFloatArray(float* dst, const uint16_t* src, size_t count) {
  if (cpuHasF16c()) return halfToFloatF16c(dst, src, count);
  for (size_t i = 0; i < count; ++i) dst[i] = halfToFloat(src[i]);
}

void floatToHalfArray(uint16_t* dst, const float* src, size_t count) {
  if (cpuHasF16c()) return floatToHalfF16c(dst, src, count);
  for (size_t i = 0; i < count; ++i) dst[i] = floatToHalf(src[i]);
}

PERSEUS_SIMD_CLONES void bfloat16ToFloatArray(float* __restrict dst, const uint16_t* __restrict src,
                                              size_t count) {
  for (size_t i = 0; i < count; ++i) {
    uint32_t u = static_cast<uint32_t>(src[i]) << 16;
    std::memcpy(dst + i, &u, sizeof u);
  }
}

PERSEUS_SIMD_CLONES void floatToBfloat16Array(uint16_t* __restrict dst, const float* __restrict src,
                                              size_t count) {
  for (size_t i = 0; i < count; ++i) {
    uint32_t u;
    std::memcpy(&u, src + i, sizeof u);
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t nan = (u >> 16) | 0x40u;
    dst[i] = static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
  }
}

}  // namespace perseus::kernels
