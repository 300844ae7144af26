// CPU reduction and conversion kernels. The only place that dispatches on DataType.
// Loops are written so that GCC vectorises them (AVX2/AVX-512 via target_clones where it
// pays); float16 and bfloat16 are widened to float32, combined, and rounded back
// (round-to-nearest-even).
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/dtype.h"

namespace perseus::kernels {

// acc[i] = acc[i] op src[i]. op is Sum, Min, Max or Product (never Average).
void reduceInto(void* acc, const void* src, size_t count, DataType dtype, ReduceOp op);
// out[i] = a[i] op b[i]; out may alias a or b.
void reduce2(void* out, const void* a, const void* b, size_t count, DataType dtype, ReduceOp op);
// data[i] *= factor (integers: rounded toward zero after multiplying in double).
void scale(void* data, size_t count, DataType dtype, double factor);
// dst[i] = src[i] * factor, as scale() but out of place.
void scaleCopy(void* dst, const void* src, size_t count, DataType dtype, double factor);

// IEEE half and bfloat16 conversions.
float halfToFloat(uint16_t h);
uint16_t floatToHalf(float f);
float bfloat16ToFloat(uint16_t b);
uint16_t floatToBfloat16(float f);
void floatToHalfArray(uint16_t* dst, const float* src, size_t count);
void halfToFloatArray(float* dst, const uint16_t* src, size_t count);

// True if any element is NaN or +-Inf (floating types only; false otherwise).
bool hasNonFinite(const void* data, size_t count, DataType dtype);

}  // namespace perseus::kernels
