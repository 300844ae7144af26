// Dispatch of the reductions on DataType and ReduceOp. Each element type has one entry point
// compiled per instruction set (PERSEUS_SIMD_CLONES); float16/bfloat16 go through float32 in
// cache-sized blocks.
#include "kernels/reduce.h"

#include <algorithm>
#include <cstring>

#include "common/status.h"
#include "kernels/reduce_ops.h"
#include "kernels/simd.h"

PERSEUS_KERNEL_OPTIMIZE

namespace perseus::kernels {
namespace {

// Elements per block when widening half types, and bytes per block in reduceN: small enough
// that the temporaries stay in L1.
constexpr size_t kWideBlock = 1024;
constexpr size_t kBlockBytes = 8192;

template <typename T>
inline void dispatchArith(int shape, T* out, const T* a, const T* b, size_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ops::loop<ops::Sum>(shape, out, a, b, n);
    case ReduceOp::kProduct:
      return ops::loop<ops::Product>(shape, out, a, b, n);
    case ReduceOp::kMin:
      return ops::loop<ops::Min>(shape, out, a, b, n);
    case ReduceOp::kMax:
      return ops::loop<ops::Max>(shape, out, a, b, n);
    case ReduceOp::kAverage:
    case ReduceOp::kAdasum:
      break;
  }
}

#define PERSEUS_TYPED_REDUCE(Name, T)                                                \
  PERSEUS_SIMD_CLONES void Name(int shape, T* out, const T* a, const T* b, size_t n, \
                                ReduceOp op) {                                       \
    dispatchArith<T>(shape, out, a, b, n, op);                                       \
  }
PERSEUS_TYPED_REDUCE(reduceU8, uint8_t)
PERSEUS_TYPED_REDUCE(reduceI8, int8_t)
PERSEUS_TYPED_REDUCE(reduceI32, int32_t)
PERSEUS_TYPED_REDUCE(reduceI64, int64_t)
PERSEUS_TYPED_REDUCE(reduceF32, float)
PERSEUS_TYPED_REDUCE(reduceF64, double)
#undef PERSEUS_TYPED_REDUCE

PERSEUS_SIMD_CLONES void reduceBool(int shape, uint8_t* out, const uint8_t* a, const uint8_t* b,
                                    size_t n, ReduceOp op) {
  if (op == ReduceOp::kSum || op == ReduceOp::kMax) {
    ops::loop<ops::Or>(shape, out, a, b, n);
  } else {
    ops::loop<ops::And>(shape, out, a, b, n);
  }
}

using ToFloat = void (*)(float*, const uint16_t*, size_t);
using FromFloat = void (*)(uint16_t*, const float*, size_t);

// Widen a and b block by block, combine in float32, round back. Reading a block of a and b
// before writing the same block of out makes any exact aliasing safe.
void reduceWide(uint16_t* out, const uint16_t* a, const uint16_t* b, size_t n, ReduceOp op,
                ToFloat to, FromFloat from) {
  alignas(64) float fa[kWideBlock];
  alignas(64) float fb[kWideBlock];
  for (size_t i = 0; i < n; i += kWideBlock) {
    size_t m = std::min(kWideBlock, n - i);
    to(fa, a + i, m);
    to(fb, b + i, m);
    reduceF32(ops::kInto, fa, fa, fb, m, op);
    from(out + i, fa, m);
  }
}

void checkOp(ReduceOp op) {
  if (op == ReduceOp::kAverage) {
    throw InvalidArgumentError(
        "kernels: Average is not a reduction kernel op; reduce with Sum and scale the result");
  }
  if (op == ReduceOp::kAdasum) {
    throw InvalidArgumentError(
        "kernels: Adasum is not an element-wise op; the adasum allreduce algorithm runs it");
  }
}

void reduceShaped(int shape, void* out, const void* a, const void* b, size_t n, DataType dtype,
                  ReduceOp op) {
  switch (dtype) {
    case DataType::kUInt8:
      return reduceU8(shape, static_cast<uint8_t*>(out), static_cast<const uint8_t*>(a),
                      static_cast<const uint8_t*>(b), n, op);
    case DataType::kInt8:
      return reduceI8(shape, static_cast<int8_t*>(out), static_cast<const int8_t*>(a),
                      static_cast<const int8_t*>(b), n, op);
    case DataType::kInt32:
      return reduceI32(shape, static_cast<int32_t*>(out), static_cast<const int32_t*>(a),
                       static_cast<const int32_t*>(b), n, op);
    case DataType::kInt64:
      return reduceI64(shape, static_cast<int64_t*>(out), static_cast<const int64_t*>(a),
                       static_cast<const int64_t*>(b), n, op);
    case DataType::kFloat32:
      return reduceF32(shape, static_cast<float*>(out), static_cast<const float*>(a),
                       static_cast<const float*>(b), n, op);
    case DataType::kFloat64:
      return reduceF64(shape, static_cast<double*>(out), static_cast<const double*>(a),
                       static_cast<const double*>(b), n, op);
    case DataType::kBool:
      return reduceBool(shape, static_cast<uint8_t*>(out), static_cast<const uint8_t*>(a),
                        static_cast<const uint8_t*>(b), n, op);
    case DataType::kFloat16:
      return reduceWide(static_cast<uint16_t*>(out), static_cast<const uint16_t*>(a),
                        static_cast<const uint16_t*>(b), n, op, halfToFloatArray, floatToHalfArray);
    case DataType::kBFloat16:
      return reduceWide(static_cast<uint16_t*>(out), static_cast<const uint16_t*>(a),
                        static_cast<const uint16_t*>(b), n, op, bfloat16ToFloatArray,
                        floatToBfloat16Array);
  }
  throw InvalidArgumentError(PERSEUS_STR("kernels: unknown dtype " << static_cast<int>(dtype)));
}

// reduceN for half types: accumulate every source in float32, round once.
void reduceNWide(uint16_t* out, const void* const* srcs, int n, size_t count, ReduceOp op,
                 ToFloat to, FromFloat from) {
  alignas(64) float acc[kWideBlock];
  alignas(64) float tmp[kWideBlock];
  for (size_t i = 0; i < count; i += kWideBlock) {
    size_t m = std::min(kWideBlock, count - i);
    to(acc, static_cast<const uint16_t*>(srcs[0]) + i, m);
    for (int k = 1; k < n; ++k) {
      to(tmp, static_cast<const uint16_t*>(srcs[k]) + i, m);
      reduceF32(ops::kInto, acc, acc, tmp, m, op);
    }
    from(out + i, acc, m);
  }
}

bool overlaps(const void* a, const void* b, size_t bytes) {
  auto pa = reinterpret_cast<uintptr_t>(a);
  auto pb = reinterpret_cast<uintptr_t>(b);
  return pa < pb + bytes && pb < pa + bytes;
}

}  // namespace

void reduceInto(void* acc, const void* src, size_t count, DataType dtype, ReduceOp op) {
  checkOp(op);
  if (count == 0) return;
  reduceShaped(ops::kInto, acc, acc, src, count, dtype, op);
}

void reduce2(void* out, const void* a, const void* b, size_t count, DataType dtype, ReduceOp op) {
  checkOp(op);
  if (count == 0) return;
  int shape = out == a ? ops::kInto : out == b ? ops::kIntoRev : ops::kTwo;
  reduceShaped(shape, out, a, b, count, dtype, op);
}

void reduceN(void* out, const void* const* srcs, int n, size_t count, DataType dtype, ReduceOp op) {
  checkOp(op);
  PERSEUS_CHECK(n >= 1, "reduceN needs at least one source");
  size_t esize = dataTypeSize(dtype);
  if (count == 0) return;
  if (n == 1) {
    if (out != srcs[0]) std::memmove(out, srcs[0], count * esize);
    return;
  }
  if (dtype == DataType::kFloat16 || dtype == DataType::kBFloat16) {
    bool half = dtype == DataType::kFloat16;
    return reduceNWide(static_cast<uint16_t*>(out), srcs, n, count, op,
                       half ? halfToFloatArray : bfloat16ToFloatArray,
                       half ? floatToHalfArray : floatToBfloat16Array);
  }
  bool aliased = false;
  for (int k = 0; k < n; ++k) aliased = aliased || overlaps(out, srcs[k], count * esize);
  // Block by block so the partial result stays in L1 while every source streams past once;
  // through a temporary when out is also a source (it must be read before it is written).
  alignas(64) unsigned char tmp[kBlockBytes];
  size_t block = kBlockBytes / esize;
  for (size_t i = 0; i < count; i += block) {
    size_t m = std::min(block, count - i);
    size_t off = i * esize;
    auto at = [&](const void* p) { return static_cast<const unsigned char*>(p) + off; };
    unsigned char* dst = aliased ? tmp : static_cast<unsigned char*>(out) + off;
    reduceShaped(ops::kTwo, dst, at(srcs[0]), at(srcs[1]), m, dtype, op);
    for (int k = 2; k < n; ++k) reduceShaped(ops::kInto, dst, dst, at(srcs[k]), m, dtype, op);
    if (aliased) std::memcpy(static_cast<unsigned char*>(out) + off, tmp, m * esize);
  }
}

}  // namespace perseus::kernels
