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
// out[i] = srcs[0][i] op srcs[1][i] op ... op srcs[n-1][i], combined in that order (so every
// rank that runs it on the same inputs gets the same bits). float16/bfloat16 accumulate in
// float32 and round once. out may alias any source. n >= 1.
void reduceN(void* out, const void* const* srcs, int n, size_t count, DataType dtype, ReduceOp op);
// data[i] *= factor (integers: rounded toward zero after multiplying in double).
void scale(void* data, size_t count, DataType dtype, double factor);
// dst[i] = src[i] * factor, as scale() but out of place.
void scaleCopy(void* dst, const void* src, size_t count, DataType dtype, double factor);
// The factor to scale a tensor of `dtype` that lives on a GPU by, so that scale(), scaleCopy()
// and the CUDA copy kernels give the bits of Horovod's CUDA scaling: float16 is multiplied in
// float16 by the factor rounded to float16; every other dtype by `factor` itself. (The
// product of two float16 values is exact in float32, so multiplying in float32 by the rounded
// factor and rounding once is the float16 multiply.) Host tensors keep `factor`: float16 on
// the CPU is scaled in float32, as Horovod's CPU scaling.
double gpuScaleFactor(DataType dtype, double factor);

// IEEE half and bfloat16 conversions.
float halfToFloat(uint16_t h);
uint16_t floatToHalf(float f);
float bfloat16ToFloat(uint16_t b);
uint16_t floatToBfloat16(float f);
void floatToHalfArray(uint16_t* dst, const float* src, size_t count);
void halfToFloatArray(float* dst, const uint16_t* src, size_t count);
void floatToBfloat16Array(uint16_t* dst, const float* src, size_t count);
void bfloat16ToFloatArray(float* dst, const uint16_t* src, size_t count);

// memcpy for large outputs that will not be read again soon: non-temporal stores bypass the
// cache (no read-for-ownership), which saves DRAM traffic once the data outgrows L3. Falls
// back to memcpy for small or unaligned-tail parts. Buffers must not overlap.
void copyStreaming(void* dst, const void* src, size_t bytes);
// The same without the size threshold and without the closing fence: for callers that
// stream a large output out in cache-sized chunks. They call nonTemporalFence() once after
// the last chunk, before anything tells another thread that the data is there.
void copyNonTemporal(void* dst, const void* src, size_t bytes);
void nonTemporalFence();

// True if any element is NaN or +-Inf (floating types only; false otherwise).
bool hasNonFinite(const void* data, size_t count, DataType dtype);

}  // namespace perseus::kernels
