#include "fusion/tensor_groups.h"

#include <map>
#include <tuple>

namespace perseus::fusion {

using engine::TensorMeta;
namespace {

// Tensors with equal keys may share a group.
using Key = std::tuple<int, int, int, double, double, int, int>;

bool fusable(const Response& r) {
  if (r.is_error) return false;
  return r.op == OpType::kAllreduce || r.op == OpType::kReducescatter ||
         r.op == OpType::kAllgather || r.op == OpType::kBroadcast;
}

// Adasum's coefficients belong to one tensor (Note [Adasum]): each of its tensors runs alone.
bool eachAlone(const Response& r) {
  return !r.is_error && r.op == OpType::kAllreduce && r.reduce_op == ReduceOp::kAdasum;
}

// The last field keeps CPU and CUDA tensors in different groups (different data planes).
Key keyOf(const Response& r, size_t tensor) {
  const int dev = static_cast<int>(r.device_kind);
  switch (r.op) {
    case OpType::kAllreduce:
    case OpType::kReducescatter:
      return {static_cast<int>(r.op),
              static_cast<int>(r.tensors[tensor].dtype),
              static_cast<int>(r.reduce_op),
              r.prescale,
              r.postscale,
              0,
              dev};
    case OpType::kBroadcast:
      return {static_cast<int>(r.op), 0, 0, 1.0, 1.0, r.root, dev};
    default:
      return {static_cast<int>(r.op), 0, 0, 1.0, 1.0, 0, dev};
  }
}

}  // namespace

size_t fusionBytes(const Response& r, size_t tensor, int set_size) {
  const TensorMeta& t = r.tensors[tensor];
  if (r.op != OpType::kAllgather) return t.bytes();
  int64_t rows = 0;
  for (int rank = 0; rank < set_size; ++rank) rows += r.first_dims[tensor * set_size + rank];
  return static_cast<size_t>(rows * t.rowElements()) * dataTypeSize(t.dtype);
}

std::vector<FusionGroup> planGroups(const std::vector<Response>& responses, int set_size,
                                    int64_t threshold) {
  std::vector<FusionGroup> groups;
  groups.reserve(responses.size());
  std::map<Key, size_t> open;  // key -> index of the group still accepting tensors
  const auto limit = static_cast<size_t>(threshold);
  for (size_t i = 0; i < responses.size(); ++i) {
    const bool last_response = i + 1 == responses.size();
    const Response& r = responses[i];
    if (!fusable(r) || r.tensors.empty()) {
      FusionGroup g;
      g.op = r.op;
      g.items.push_back({i, 0});
      groups.push_back(std::move(g));
      continue;
    }
    for (size_t t = 0; t < r.tensors.size(); ++t) {
      if (eachAlone(r)) {
        FusionGroup g;
        g.op = r.op;
        g.items.push_back({i, t});
        groups.push_back(std::move(g));
        continue;
      }
      size_t bytes = fusionBytes(r, t, set_size);
      Key key = keyOf(r, t);
      auto it = open.find(key);
      if (it != open.end() && groups[it->second].bytes + bytes <= limit) {
        groups[it->second].items.push_back({i, t});
        groups[it->second].bytes += bytes;
        continue;
      }
      FusionGroup g;
      g.op = r.op;
      g.items.push_back({i, t});
      g.bytes = bytes;
      groups.push_back(std::move(g));
      // A tensor that fills the buffer alone leaves the open group open for smaller ones. The
      // last tensor opens none: nothing comes after it (a cycle of one call plans no map).
      const bool last = last_response && t + 1 == r.tensors.size();
      if (bytes < limit && !last) open[key] = groups.size() - 1;
    }
  }
  for (FusionGroup& g : groups) {
    if (!g.fused()) g.bytes = 0;
  }
  return groups;
}

}  // namespace perseus::fusion
