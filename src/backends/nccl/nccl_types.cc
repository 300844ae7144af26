#include "backends/nccl/nccl_types.h"

#include "common/status.h"

namespace perseus::nccl {

ncclDataType_t ncclType(DataType dtype) {
  switch (dtype) {
    case DataType::kUInt8:
      return ncclUint8;
    case DataType::kInt8:
      return ncclInt8;
    case DataType::kInt32:
      return ncclInt32;
    case DataType::kInt64:
      return ncclInt64;
    case DataType::kFloat16:
      return ncclFloat16;
    case DataType::kBFloat16:
      return ncclBfloat16;
    case DataType::kFloat32:
      return ncclFloat32;
    case DataType::kFloat64:
      return ncclFloat64;
    case DataType::kBool:
      return ncclUint8;
  }
  throw InvalidArgumentError(
      PERSEUS_STR("dtype " << static_cast<int>(dtype) << " has no NCCL type"));
}

ncclRedOp_t ncclOp(ReduceOp op, DataType dtype) {
  const bool logical = dtype == DataType::kBool;
  switch (op) {
    case ReduceOp::kSum:
      return logical ? ncclMax : ncclSum;
    case ReduceOp::kProduct:
      return logical ? ncclMin : ncclProd;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kAverage:
      return ncclAvg;
    case ReduceOp::kAdasum:
      break;  // not element-wise: NcclBackend runs it host-staged
  }
  throw InvalidArgumentError(
      PERSEUS_STR("reduce op " << static_cast<int>(op) << " has no NCCL op"));
}

}  // namespace perseus::nccl
