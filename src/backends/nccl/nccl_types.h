// Mapping of the core's dtypes and reduce ops onto NCCL's.
#pragma once

#include <nccl.h>

#include "common/dtype.h"

namespace perseus::nccl {

ncclDataType_t ncclType(DataType dtype);
// bool travels as uint8, where Sum is logical or (max) and Product logical and (min), as on
// the CPU path. op is never Average here.
ncclRedOp_t ncclOp(ReduceOp op, DataType dtype);

}  // namespace perseus::nccl
