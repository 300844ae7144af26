#include "kernels/adasum.h"

#include <algorithm>
#include <cstdint>

#include "common/status.h"
#include "kernels/reduce.h"

namespace perseus::kernels {
namespace {

constexpr size_t kBlock = 1024;

template <typename T>
DotAndNorms dotAndNormsOf(const T* a, const T* b, size_t n) {
  DotAndNorms r;
  for (size_t i = 0; i < n; ++i) {
    const double x = static_cast<double>(a[i]), y = static_cast<double>(b[i]);
    r.dot += x * y;
    r.a_norm_sq += x * x;
    r.b_norm_sq += y * y;
  }
  return r;
}

template <typename T>
void scaledAddOf(T* a, double ca, const T* b, double cb, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    a[i] = static_cast<T>(ca * static_cast<double>(a[i]) + cb * static_cast<double>(b[i]));
  }
}

using ToFloat = void (*)(float*, const uint16_t*, size_t);
using FromFloat = void (*)(uint16_t*, const float*, size_t);

// float16/bfloat16: widened to float32 a block at a time.
DotAndNorms dotAndNormsWide(const uint16_t* a, const uint16_t* b, size_t n, ToFloat to) {
  alignas(64) float fa[kBlock];
  alignas(64) float fb[kBlock];
  DotAndNorms r;
  for (size_t i = 0; i < n; i += kBlock) {
    const size_t m = std::min(kBlock, n - i);
    to(fa, a + i, m);
    to(fb, b + i, m);
    const DotAndNorms part = dotAndNormsOf(fa, fb, m);
    r.dot += part.dot;
    r.a_norm_sq += part.a_norm_sq;
    r.b_norm_sq += part.b_norm_sq;
  }
  return r;
}

void scaledAddWide(uint16_t* a, double ca, const uint16_t* b, double cb, size_t n, ToFloat to,
                   FromFloat from) {
  alignas(64) float fa[kBlock];
  alignas(64) float fb[kBlock];
  for (size_t i = 0; i < n; i += kBlock) {
    const size_t m = std::min(kBlock, n - i);
    to(fa, a + i, m);
    to(fb, b + i, m);
    scaledAddOf(fa, ca, fb, cb, m);
    from(a + i, fa, m);
  }
}

[[noreturn]] void notFloatingPoint(DataType dtype) {
  throw InvalidArgumentError(
      PERSEUS_STR("Adasum takes float16, bfloat16, float32 or float64 "
                  "tensors, not "
                  << dataTypeName(dtype)));
}

}  // namespace

DotAndNorms dotAndNorms(const void* a, const void* b, size_t count, DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32:
      return dotAndNormsOf(static_cast<const float*>(a), static_cast<const float*>(b), count);
    case DataType::kFloat64:
      return dotAndNormsOf(static_cast<const double*>(a), static_cast<const double*>(b), count);
    case DataType::kFloat16:
      return dotAndNormsWide(static_cast<const uint16_t*>(a), static_cast<const uint16_t*>(b),
                             count, halfToFloatArray);
    case DataType::kBFloat16:
      return dotAndNormsWide(static_cast<const uint16_t*>(a), static_cast<const uint16_t*>(b),
                             count, bfloat16ToFloatArray);
    default:
      notFloatingPoint(dtype);
  }
}

void scaledAdd(void* a, double ca, const void* b, double cb, size_t count, DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32:
      return scaledAddOf(static_cast<float*>(a), ca, static_cast<const float*>(b), cb, count);
    case DataType::kFloat64:
      return scaledAddOf(static_cast<double*>(a), ca, static_cast<const double*>(b), cb, count);
    case DataType::kFloat16:
      return scaledAddWide(static_cast<uint16_t*>(a), ca, static_cast<const uint16_t*>(b), cb,
                           count, halfToFloatArray, floatToHalfArray);
    case DataType::kBFloat16:
      return scaledAddWide(static_cast<uint16_t*>(a), ca, static_cast<const uint16_t*>(b), cb,
                           count, bfloat16ToFloatArray, floatToBfloat16Array);
    default:
      notFloatingPoint(dtype);
  }
}

}  // namespace perseus::kernels
