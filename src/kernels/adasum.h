// The two vector kernels of Adasum (collectives/allreduce_adasum.cc combines them over ranks).
// Floating-point dtypes only; anything else is an InvalidArgumentError.
#pragma once

#include <cstddef>

#include "common/dtype.h"

namespace perseus::kernels {

struct DotAndNorms {
  double dot = 0, a_norm_sq = 0, b_norm_sq = 0;
};

// a·b, a·a and b·b over `count` elements, accumulated in float64 (float16 and bfloat16 are
// widened first).
DotAndNorms dotAndNorms(const void* a, const void* b, size_t count, DataType dtype);

// a[i] = ca * a[i] + cb * b[i], computed in float64 and rounded once to `dtype`.
void scaledAdd(void* a, double ca, const void* b, double cb, size_t count, DataType dtype);

}  // namespace perseus::kernels
