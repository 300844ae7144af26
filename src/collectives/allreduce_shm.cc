// Note [Shared-memory allreduce]
// All members on one host. The vector is processed in segments that fit half a slot, so the
// working set stays in L2/L3 whatever the vector size. For segment k (slot half k % 2):
//   copy-in   each rank copies its input segment into its own slot half;
//   barrier;
//   reduce    rank r combines sub-block r of the segment across every slot, reading peers'
//             slots directly, and writes the result into sub-block r of every slot (its own
//             and its peers'); meanwhile it copies segment k+1 into its other half;
//   barrier;
//   copy-out  each rank copies the whole reduced segment out of its own slot.
// The second barrier of segment k is the first of segment k+1, so n segments take n + 1
// barriers. Every element is reduced by one rank only, so all ranks get the same bits. Apart
// from the cache-resident slots, memory traffic is one read of the input and one write of the
// output: the floor of perf-anchors.md §3. Peers' slots are only touched between barriers, as
// Note [Arena slot discipline] (arena_view.h) requires.
#include <algorithm>
#include <cstring>

#include "collectives/arena_view.h"
#include "collectives/cost_model.h"
#include "collectives/detail.h"
#include "collectives/registry.h"
#include "kernels/reduce.h"

namespace perseus::collectives {
namespace {

// Segments larger than this gain nothing (the per-segment barrier is ~0.1 µs) and start to
// spill L2; smaller ones keep each rank's sub-block hot.
constexpr size_t kMaxSegmentBytes = 256 * 1024;
// Outputs beyond this no longer fit the 32 MiB L3 next to the inputs: stream them out.
constexpr size_t kStreamingOutputBytes = 16u << 20;

size_t segmentElems(const detail::ArenaView& view, size_t esize) {
  return std::min(view.halfBytes(), kMaxSegmentBytes) / esize;
}

bool supports(const Communicator& comm, const CollectiveArgs& args) {
  return comm.arena() != nullptr && comm.arena()->slotBytes() / 2 >= 64 * 16;
}

double estimate(const Communicator& comm, const CollectiveArgs& args) {
  size_t bytes = args.totalBytes();
  size_t seg = std::min(comm.arena()->slotBytes() / 2, kMaxSegmentBytes);
  double segments = static_cast<double>((bytes + seg - 1) / seg);
  return (segments + 1) * cost::kBarrierUs + 4.0 * bytes * cost::kArenaUsPerByte;
}

void run(Communicator& comm, const CollectiveArgs& args) {
  detail::ArenaView view(comm);
  const int p = comm.size(), r = comm.rank();
  const size_t esize = args.elementSize();
  const size_t seg = segmentElems(view, esize);
  const size_t nseg = (args.count + seg - 1) / seg;
  const bool streaming = args.count * esize >= kStreamingOutputBytes;
  const auto* in = detail::bytePtr(args.in);
  auto* out = detail::bytePtr(args.out);
  // No allocation on the small-message path for up to kStackRanks ranks.
  constexpr int kStackRanks = 32;
  const void* stack_srcs[kStackRanks];
  std::vector<const void*> heap_srcs(p > kStackRanks ? p : 0);
  const void** srcs = p > kStackRanks ? heap_srcs.data() : stack_srcs;

  auto copyIn = [&](size_t k) {
    size_t first = k * seg, n = std::min(seg, args.count - first);
    std::memcpy(view.half(r, k % 2), in + first * esize, n * esize);
  };
  copyIn(0);
  view.barrier();
  for (size_t k = 0; k < nseg; ++k) {
    const int h = static_cast<int>(k % 2);
    const size_t first = k * seg, n = std::min(seg, args.count - first);
    detail::Blocks blocks(n, p, std::max<size_t>(1, 64 / esize));
    const size_t off = blocks.begin(r) * esize, len = blocks.size(r);
    if (len > 0) {
      for (int q = 0; q < p; ++q) srcs[q] = view.half(q, h) + off;
      unsigned char* mine = view.half(r, h) + off;
      kernels::reduceN(mine, srcs, p, len, args.dtype, args.op);
      for (int q = 0; q < p; ++q) {
        if (q != r) std::memcpy(view.half(q, h) + off, mine, len * esize);
      }
    }
    if (k + 1 < nseg) copyIn(k + 1);
    view.barrier();
    if (streaming) {
      kernels::copyStreaming(out + first * esize, view.half(r, h), n * esize);
    } else {
      std::memcpy(out + first * esize, view.half(r, h), n * esize);
    }
  }
}

}  // namespace

extern const Algorithm kAllreduceShm = {
    "shm", Collective::kAllreduce,
    "reduce-scatter and allgather through the shared-memory arena, in cache-sized segments; "
    "needs every member on this host",
    supports, estimate, run};

}  // namespace perseus::collectives
