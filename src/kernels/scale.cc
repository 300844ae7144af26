// Scaling (Average = Sum then scale, pre/postscale factors) and the NaN/Inf check.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/status.h"
#include "kernels/reduce.h"
#include "kernels/simd.h"

PERSEUS_KERNEL_OPTIMIZE

namespace perseus::kernels {
namespace {

constexpr size_t kWideBlock = 1024;

// Integers: multiply in double, round toward zero, saturate (a float-to-int conversion out of
// range would be undefined).
template <typename T>
inline T scaleInt(T x, double factor) {
  double v = std::trunc(static_cast<double>(x) * factor);
  constexpr double lo = static_cast<double>(std::numeric_limits<T>::min());
  constexpr double hi = static_cast<double>(std::numeric_limits<T>::max());
  if (!(v > lo)) return std::numeric_limits<T>::min();  // also NaN
  if (v >= hi) return std::numeric_limits<T>::max();
  return static_cast<T>(v);
}

template <typename T>
inline void scaleLoop(T* __restrict dst, const T* __restrict src, size_t n, double factor) {
  if constexpr (std::is_floating_point_v<T>) {
    const T f = static_cast<T>(factor);
    for (size_t i = 0; i < n; ++i) dst[i] = src[i] * f;
  } else {
    for (size_t i = 0; i < n; ++i) dst[i] = scaleInt(src[i], factor);
  }
}

// In place when dst == src: the loops read each element before writing it, so the aliasing
// is harmless; the __restrict copies are only made for distinct buffers.
#define PERSEUS_TYPED_SCALE(Name, T)                                             \
  PERSEUS_SIMD_CLONES void Name(T* dst, const T* src, size_t n, double factor) { \
    if (dst == src) {                                                            \
      if constexpr (std::is_floating_point_v<T>) {                               \
        const T f = static_cast<T>(factor);                                      \
        for (size_t i = 0; i < n; ++i) dst[i] *= f;                              \
      } else {                                                                   \
        for (size_t i = 0; i < n; ++i) dst[i] = scaleInt(dst[i], factor);        \
      }                                                                          \
    } else {                                                                     \
      scaleLoop<T>(dst, src, n, factor);                                         \
    }                                                                            \
  }
PERSEUS_TYPED_SCALE(scaleU8, uint8_t)
PERSEUS_TYPED_SCALE(scaleI8, int8_t)
PERSEUS_TYPED_SCALE(scaleI32, int32_t)
PERSEUS_TYPED_SCALE(scaleI64, int64_t)
PERSEUS_TYPED_SCALE(scaleF32, float)
PERSEUS_TYPED_SCALE(scaleF64, double)
#undef PERSEUS_TYPED_SCALE

void scaleWide(uint16_t* dst, const uint16_t* src, size_t n, double factor,
               void (*to)(float*, const uint16_t*, size_t),
               void (*from)(uint16_t*, const float*, size_t)) {
  alignas(64) float tmp[kWideBlock];
  for (size_t i = 0; i < n; i += kWideBlock) {
    size_t m = std::min(kWideBlock, n - i);
    to(tmp, src + i, m);
    scaleF32(tmp, tmp, m, factor);
    from(dst + i, tmp, m);
  }
}

template <typename Bits>
bool anyExponentAllOnes(const void* data, size_t count, Bits mask) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  constexpr size_t kBlock = 4096;
  for (size_t i = 0; i < count; i += kBlock) {
    size_t m = std::min(kBlock, count - i);
    unsigned found = 0;
    for (size_t j = 0; j < m; ++j) {
      Bits b;
      std::memcpy(&b, p + (i + j) * sizeof(Bits), sizeof(Bits));
      found |= static_cast<unsigned>((b & mask) == mask);
    }
    if (found) return true;
  }
  return false;
}

}  // namespace

void scaleCopy(void* dst, const void* src, size_t count, DataType dtype, double factor) {
  switch (dtype) {
    case DataType::kUInt8:
      return scaleU8(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), count, factor);
    case DataType::kInt8:
      return scaleI8(static_cast<int8_t*>(dst), static_cast<const int8_t*>(src), count, factor);
    case DataType::kInt32:
      return scaleI32(static_cast<int32_t*>(dst), static_cast<const int32_t*>(src), count, factor);
    case DataType::kInt64:
      return scaleI64(static_cast<int64_t*>(dst), static_cast<const int64_t*>(src), count, factor);
    case DataType::kFloat32:
      return scaleF32(static_cast<float*>(dst), static_cast<const float*>(src), count, factor);
    case DataType::kFloat64:
      return scaleF64(static_cast<double*>(dst), static_cast<const double*>(src), count, factor);
    case DataType::kFloat16:
      return scaleWide(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), count,
                       factor, halfToFloatArray, floatToHalfArray);
    case DataType::kBFloat16:
      return scaleWide(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), count,
                       factor, bfloat16ToFloatArray, floatToBfloat16Array);
    case DataType::kBool:
      // A bool scaled by a non-zero factor keeps its truth value.
      if (factor == 0.0) {
        std::memset(dst, 0, count);
      } else if (dst != src) {
        std::memcpy(dst, src, count);
      }
      return;
  }
  throw InvalidArgumentError(PERSEUS_STR("kernels: unknown dtype " << static_cast<int>(dtype)));
}

double gpuScaleFactor(DataType dtype, double factor) {
  if (dtype != DataType::kFloat16) return factor;
  return static_cast<double>(halfToFloat(floatToHalf(static_cast<float>(factor))));
}

void scale(void* data, size_t count, DataType dtype, double factor) {
  scaleCopy(data, data, count, dtype, factor);
}

bool hasNonFinite(const void* data, size_t count, DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32:
      return anyExponentAllOnes<uint32_t>(data, count, 0x7f800000u);
    case DataType::kFloat64:
      return anyExponentAllOnes<uint64_t>(data, count, 0x7ff0000000000000ull);
    case DataType::kFloat16:
      return anyExponentAllOnes<uint16_t>(data, count, 0x7c00u);
    case DataType::kBFloat16:
      return anyExponentAllOnes<uint16_t>(data, count, 0x7f80u);
    default:
      return false;
  }
}

}  // namespace perseus::kernels
