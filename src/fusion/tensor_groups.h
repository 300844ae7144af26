// Fusion groups (Note [Fusion]): which tensors of a cycle's ready responses move together
// through one fusion buffer and one collective. A pure function of the response list, so that
// every rank computes the same plan.
//
// Note [Fusion]
//  - Fusable kinds: allreduce and reducescatter with the same dtype, reduce op and scales;
//    allgather (any dtype: it moves bytes); broadcast with the same root. Alltoall, barrier,
//    join, process-set changes and errors each run alone; so does each tensor of an Adasum
//    allreduce (its coefficients are the tensor's own, Note [Adasum]).
//  - Greedy in response order: a tensor joins the open group of its kind while the group's
//    bytes stay within the threshold; a tensor larger than the threshold runs alone (in place,
//    no copy). Threshold 0 disables fusion.
//  - Groups run in the order of their first tensor. A grouped request's tensors may land in
//    different groups; its handle completes when the last of them has run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "negotiation/request.h"

namespace perseus::fusion {

using engine::OpType;
using engine::Response;

struct FusionItem {
  size_t response;  // index into the response list
  size_t tensor;    // index into that response's tensors (0 for tensor-less responses)
};

struct FusionGroup {
  OpType op = OpType::kAllreduce;
  std::vector<FusionItem> items;
  size_t bytes = 0;  // fusion-buffer bytes the group needs (0 when it runs alone)
  bool fused() const { return items.size() > 1; }
};

// Fusion-buffer bytes of one tensor: the input for allreduce, broadcast and reducescatter,
// every rank's rows for allgather.
size_t fusionBytes(const Response& response, size_t tensor, int set_size);

std::vector<FusionGroup> planGroups(const std::vector<Response>& responses, int set_size,
                                    int64_t threshold);

}  // namespace perseus::fusion
