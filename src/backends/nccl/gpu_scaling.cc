#include "backends/nccl/gpu_scaling.h"

#include "kernels/reduce.h"

namespace perseus::nccl {

GpuScaling gpuScaling(DataType dtype, ReduceOp op, double prescale, double postscale, int size) {
  if (op == ReduceOp::kAverage) {
    op = ReduceOp::kSum;
    postscale /= size;
  }
  return {op, kernels::gpuScaleFactor(dtype, prescale), kernels::gpuScaleFactor(dtype, postscale)};
}

}  // namespace perseus::nccl
