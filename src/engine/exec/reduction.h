// What every data plane reduces and stages with: the reduction after Average is folded into
// a scale, the rows of a reducescatter block, and a set's grow-only staging memory.
//
// Thread contract: the Cycle, under the cycle lock (cycle.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "negotiation/request.h"

namespace perseus::engine {

// What every executor reduces with: Average becomes Sum with 1/size folded into the postscale.
struct Reduction {
  ReduceOp op;
  double prescale, postscale;
};
inline Reduction reductionOf(const Response& r, int size) {
  Reduction red{r.reduce_op, r.prescale, r.postscale};
  if (red.op == ReduceOp::kAverage) {
    red.op = ReduceOp::kSum;
    red.postscale /= size;
  }
  return red;
}

// Rows of block `r` when `rows` are split over `size` ranks (the first rows % size get one more),
// as reducescatter defines its output.
inline int64_t blockRows(int64_t rows, int size, int r) {
  return rows / size + (r < rows % size ? 1 : 0);
}

// Staging memory of one process set: allocated on first use, grown only, never shrunk, so a
// steady-state cycle neither allocates nor page-faults.
class FusionBuffer {
 public:
  uint8_t* reserve(size_t bytes);
  size_t capacity() const { return capacity_; }

 private:
  std::unique_ptr<uint8_t[]> data_;
  size_t capacity_ = 0;
};

}  // namespace perseus::engine
