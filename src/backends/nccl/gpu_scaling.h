// The reduction a GPU collective runs: Average becomes Sum with 1/size folded into the
// postscale, and both factors are the ones Horovod's CUDA scaling uses (float16 scales by the
// factor rounded to float16: kernels::gpuScaleFactor).
#pragma once

#include "common/dtype.h"

namespace perseus::nccl {

struct GpuScaling {
  ReduceOp op;
  double prescale, postscale;
};

GpuScaling gpuScaling(DataType dtype, ReduceOp op, double prescale, double postscale, int size);

}  // namespace perseus::nccl
