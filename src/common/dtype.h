// Element types and reduction ops as the core sees them. Algorithms are type-erased
// (void*, count, DataType); only kernels/ dispatch on the type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace perseus {

// Numbering mirrors perseus_dtype in include/perseus/c_api.h.
enum class DataType : int32_t {
  kUInt8 = 0,
  kInt8 = 1,
  kInt32 = 2,
  kInt64 = 3,
  kFloat16 = 4,
  kBFloat16 = 5,
  kFloat32 = 6,
  kFloat64 = 7,
  kBool = 8,
};
constexpr int kNumDataTypes = 9;

// Numbering mirrors perseus_reduce_op.
// Adasum is an allreduce algorithm more than an element-wise op (collectives/allreduce_adasum.cc):
// the kernels and the element-wise algorithms never see it.
enum class ReduceOp : int32_t {
  kSum = 0,
  kAverage = 1,
  kMin = 2,
  kMax = 3,
  kProduct = 4,
  kAdasum = 5
};
constexpr int kNumReduceOps = 6;

size_t dataTypeSize(DataType t);
const char* dataTypeName(DataType t);
const char* reduceOpName(ReduceOp op);
bool isValidDataType(int32_t t);
bool isValidReduceOp(int32_t op);
bool isFloatingPoint(DataType t);

}  // namespace perseus
