#include "negotiation/request.h"

#include <sstream>

namespace perseus::engine {

const char* opTypeName(OpType op) {
  switch (op) {
    case OpType::kAllreduce:
      return "ALLREDUCE";
    case OpType::kAllgather:
      return "ALLGATHER";
    case OpType::kBroadcast:
      return "BROADCAST";
    case OpType::kAlltoall:
      return "ALLTOALL";
    case OpType::kReducescatter:
      return "REDUCESCATTER";
    case OpType::kBarrier:
      return "BARRIER";
    case OpType::kJoin:
      return "JOIN";
    case OpType::kAddProcessSet:
      return "ADD_PROCESS_SET";
    case OpType::kRemoveProcessSet:
      return "REMOVE_PROCESS_SET";
  }
  return "UNKNOWN";
}

const char* deviceKindName(DeviceKind kind) { return kind == DeviceKind::kCuda ? "CUDA" : "CPU"; }

bool isCacheable(OpType op) {
  return op == OpType::kAllreduce || op == OpType::kAllgather || op == OpType::kBroadcast ||
         op == OpType::kAlltoall || op == OpType::kReducescatter;
}

int64_t TensorMeta::numElements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t TensorMeta::rowElements() const {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

std::string shapeString(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

std::string rankVector(const std::vector<int>& ranks) {
  return shapeString(std::vector<int64_t>(ranks.begin(), ranks.end()));
}

bool Request::sameMetadata(const Request& o) const {
  return op == o.op && tensors == o.tensors && reduce_op == o.reduce_op && prescale == o.prescale &&
         postscale == o.postscale && root == o.root && num_splits == o.num_splits &&
         set_ranks == o.set_ranks && set_id == o.set_id && device_kind == o.device_kind;
}

}  // namespace perseus::engine
