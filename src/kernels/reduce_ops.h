// Private to src/kernels/*.cc: the element-wise combine functions and the loops over them.
// Everything here is inline so that it is compiled inside each PERSEUS_SIMD_CLONES entry point
// (once per instruction set).
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace perseus::kernels::ops {

// Integers wrap (two's complement) instead of overflowing, which would be undefined.
template <typename T>
inline T wrapAdd(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
}
template <typename T>
inline T wrapMul(T a, T b) {
  using U = std::make_unsigned_t<T>;
  using W = std::conditional_t<(sizeof(U) < sizeof(unsigned)), unsigned, U>;
  return static_cast<T>(static_cast<W>(static_cast<U>(a)) * static_cast<W>(static_cast<U>(b)));
}

struct Sum {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>)
      return wrapAdd(a, b);
    else
      return a + b;
  }
};
struct Product {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>)
      return wrapMul(a, b);
    else
      return a * b;
  }
};
// Min/Max propagate NaN (like torch.maximum), so a NaN anywhere is visible in the result.
struct Min {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>)
      return (a < b || a != a) ? a : b;
    else
      return a < b ? a : b;
  }
};
struct Max {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>)
      return (a > b || a != a) ? a : b;
    else
      return a > b ? a : b;
  }
};
// bool is one byte; any non-zero byte is true, results are 0 or 1.
struct Or {
  static uint8_t apply(uint8_t a, uint8_t b) { return static_cast<uint8_t>((a | b) != 0); }
};
struct And {
  static uint8_t apply(uint8_t a, uint8_t b) { return static_cast<uint8_t>((a != 0) & (b != 0)); }
};

// The three loop shapes. Pointers are __restrict: reduce.cc routes exact aliasing
// (out == a or out == b) to the in-place shapes, and partial overlap is not allowed.
template <typename Op, typename T>
inline void loopInto(T* __restrict acc, const T* __restrict src, size_t n) {
  for (size_t i = 0; i < n; ++i) acc[i] = Op::apply(acc[i], src[i]);
}
template <typename Op, typename T>
inline void loopIntoRev(T* __restrict acc, const T* __restrict src, size_t n) {
  for (size_t i = 0; i < n; ++i) acc[i] = Op::apply(src[i], acc[i]);
}
template <typename Op, typename T>
inline void loopTwo(T* __restrict out, const T* __restrict a, const T* __restrict b, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = Op::apply(a[i], b[i]);
}

enum Shape : int { kInto = 0, kIntoRev = 1, kTwo = 2 };

template <typename Op, typename T>
inline void loop(int shape, T* out, const T* a, const T* b, size_t n) {
  switch (shape) {
    case kInto:
      return loopInto<Op>(out, b, n);  // out == a
    case kIntoRev:
      return loopIntoRev<Op>(out, a, n);  // out == b
    default:
      return loopTwo<Op>(out, a, b, n);
  }
}

}  // namespace perseus::kernels::ops
