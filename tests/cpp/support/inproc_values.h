// TEST SUPPORT ONLY. Deterministic per-rank test vectors of any dtype, and the reference
// reduction of them, for the ranks-as-threads collective tests. Values are small integers
// (|x| <= 3), so that sums and products over up to 5 ranks are exact in every type (the 8-bit
// integer types wrap the same way in the reference), and every algorithm must match bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/dtype.h"

namespace perseus::testing {

using Bytes = std::vector<unsigned char>;

// Element i of rank `rank`'s input vector (seeded by `seed`) as a double.
double testValue(int rank, size_t i, DataType t, uint32_t seed = 0);
// count elements of rank's input.
Bytes testVector(int rank, size_t count, DataType t, uint32_t seed = 0);
// The reduction over ranks 0..size-1 of testVector(rank, count, t, seed).
Bytes referenceReduce(int size, size_t count, DataType t, ReduceOp op, uint32_t seed = 0);
// A byte pattern for data-movement collectives: rank, offset and seed mixed.
Bytes testBytes(int rank, size_t bytes, uint32_t seed = 0);

// Writes x into element i of buf with the type's conversion (wrap for integers, RNE for floats).
void putValue(Bytes& buf, size_t i, DataType t, double x);
// Index of the first differing element, or -1.
long firstDifference(const Bytes& a, const Bytes& b, DataType t);

}  // namespace perseus::testing
