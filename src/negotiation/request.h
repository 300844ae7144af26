// What a rank asks for (Request) and what the coordinator decides (Response). Both are plain
// values: negotiation, the response cache and fusion planning are pure functions over them
// (see negotiation.h, response_cache.h, fusion.h), and wire.h serialises them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/status.h"

namespace perseus::engine {

enum class OpType : int32_t {
  kAllreduce = 0,
  kAllgather = 1,
  kBroadcast = 2,
  kAlltoall = 3,
  kReducescatter = 4,
  kBarrier = 5,
  kJoin = 6,
  kAddProcessSet = 7,
  kRemoveProcessSet = 8,
};
const char* opTypeName(OpType op);  // "ALLREDUCE", ...

enum class DeviceKind : int32_t { kCpu = 0, kCuda = 1 };
const char* deviceKindName(DeviceKind kind);  // "CPU", "CUDA"

// Only these ops are ever served from the response cache: their negotiation result depends
// on nothing but the metadata that the cache compares.
bool isCacheable(OpType op);

struct TensorMeta {
  DataType dtype = DataType::kFloat32;
  std::vector<int64_t> shape;

  int64_t numElements() const;
  int64_t rowElements() const;  // elements per index of the first dimension (1 for a scalar)
  size_t bytes() const { return static_cast<size_t>(numElements()) * dataTypeSize(dtype); }
  bool operator==(const TensorMeta& o) const { return dtype == o.dtype && shape == o.shape; }
  bool operator!=(const TensorMeta& o) const { return !(*this == o); }
};
std::string shapeString(const std::vector<int64_t>& shape);  // "[2, 3]"
std::string rankVector(const std::vector<int>& ranks);       // "[0, 2]"

struct Request {
  OpType op = OpType::kAllreduce;
  std::string name;
  int32_t process_set = 0;
  std::vector<TensorMeta> tensors;  // several for grouped ops; empty for barrier/join/sets
  ReduceOp reduce_op = ReduceOp::kSum;
  double prescale = 1.0;
  double postscale = 1.0;
  int32_t root = 0;                // broadcast: set rank
  int32_t num_splits = 0;          // alltoall: 0 = even split
  std::vector<int32_t> set_ranks;  // add process set: global ranks
  int32_t set_id = 0;              // remove process set
  // Where the tensors live: every rank must agree (CPU and CUDA collectives use different
  // data planes). The CUDA ordinal is local and may differ between ranks.
  DeviceKind device_kind = DeviceKind::kCpu;
  // Seconds this rank had already waited when it sent the request (a stalled cache hit goes to
  // the coordinator late): the coordinator counts the stall from the submission, not from now.
  double waited_s = 0.0;

  // Same negotiation result: everything but the name and the set.
  bool sameMetadata(const Request& o) const;
};

struct Response {
  OpType op = OpType::kAllreduce;
  std::string name;
  bool is_error = false;
  StatusCode error_code = StatusCode::kOk;
  std::string error_message;

  std::vector<TensorMeta> tensors;  // as submitted by the lowest set rank that is not joined
  ReduceOp reduce_op = ReduceOp::kSum;
  double prescale = 1.0;
  double postscale = 1.0;
  int32_t root = 0;
  // allgather: first dimension of tensor t on set rank r at [t * set_size + r].
  std::vector<int64_t> first_dims;
  int32_t last_joined_rank = -1;   // join
  std::vector<int32_t> set_ranks;  // add process set
  int32_t set_id = 0;              // remove process set
  DeviceKind device_kind = DeviceKind::kCpu;
  // An error from the global coordinator's cross-set check (set_conflict.h): it fails the
  // name in whichever sets this rank has it in flight, not in the global set only.
  bool cross_set = false;
};

// The coordinator's early report of one collective that waits on some ranks
// (PERSEUS_STALL_DIAGNOSIS): sent to every member with the cycle's responses, so that every
// rank logs it with what only that rank knows (its own call site).
struct StallNotice {
  OpType op = OpType::kAllreduce;
  std::string name;
  std::string tensors;             // "[1024, 256] float32", as a submitting rank sent it
  std::vector<int32_t> missing;    // global ranks that have not submitted it
  std::vector<std::string> hosts;  // their hosts, in the same order
  double waited_s = 0.0;           // since the earliest submission
  int32_t process_set = 0;
};

}  // namespace perseus::engine
