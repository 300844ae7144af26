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
// That is the one-segment scheme (two barriers). For several segments the reducer leaves its
// result in its own slot and every rank pulls the blocks after the barrier (each byte crosses
// between cores once instead of twice); with three buffers per slot, segment k+1 is copied in
// while peers still read segment k-1's results, so n segments take n + 2 barriers. Every element is reduced by one rank only, so all ranks get the same bits. Apart
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
// Up to this size the single-segment scheme (two barriers, results pushed) runs.
constexpr size_t kOneSegmentBytes = 64 * 1024;

bool supports(const Communicator& comm, const CollectiveArgs& args) {
  return comm.arena() != nullptr && comm.arena()->slotBytes() / 3 >= 64 * 16;
}

double estimate(const Communicator& comm, const CollectiveArgs& args) {
  size_t bytes = args.totalBytes();
  size_t seg = std::min(comm.arena()->slotBytes() / 3, kMaxSegmentBytes);
  double segments = static_cast<double>((bytes + seg - 1) / seg);
  return (segments + 2) * cost::kBarrierUs + 3.0 * bytes * cost::kArenaUsPerByte;
}

// One segment (small vectors): the reducer pushes its result into every slot, so the copy-out
// reads only the own slot and two barriers suffice.
void runOneSegment(Communicator& comm, const CollectiveArgs& args, const void** srcs) {
  detail::ArenaView view(comm);
  const int p = comm.size(), r = comm.rank();
  const size_t esize = args.elementSize(), n = args.count;
  std::memcpy(view.half(r, 0), args.in, n * esize);
  view.barrier();
  detail::Blocks blocks(n, p, std::max<size_t>(1, 64 / esize));
  const size_t off = blocks.begin(r) * esize, len = blocks.size(r);
  if (len > 0) {
    for (int q = 0; q < p; ++q) srcs[q] = view.half(q, 0) + off;
    unsigned char* mine = view.half(r, 0) + off;
    kernels::reduceN(mine, srcs, p, len, args.dtype, args.op);
    for (int q = 0; q < p; ++q) {
      if (q != r) std::memcpy(view.half(q, 0) + off, mine, len * esize);
    }
  }
  view.barrier();
  std::memcpy(args.out, view.half(r, 0), n * esize);
}

// Several segments: each reducer leaves its result in its own slot and everyone pulls the
// blocks (one crossing of the core-to-core fabric per byte instead of two); three buffers
// per slot let one barrier per segment suffice, plus a final one (slot discipline rule 3).
void runPipelined(Communicator& comm, const CollectiveArgs& args, const void** srcs) {
  transport::ShmArena* arena = comm.arena();
  const int p = comm.size(), r = comm.rank();
  const size_t esize = args.elementSize();
  const size_t third = (arena->slotBytes() / 3) & ~size_t{63};
  const size_t seg = std::min(third, kMaxSegmentBytes) / esize;
  const size_t nseg = (args.count + seg - 1) / seg;
  const bool streaming = args.count * esize >= kStreamingOutputBytes;
  const auto* in = detail::bytePtr(args.in);
  auto* out = detail::bytePtr(args.out);
  auto buf = [&](int q, size_t k) {
    return static_cast<unsigned char*>(arena->slot(comm.arenaRank(q))) + (k % 3) * third;
  };
  auto barrier = [&] { arena->barrier(comm.groupId(), comm.arenaMembers()); };
  auto segLen = [&](size_t k) { return std::min(seg, args.count - k * seg); };
  auto copyIn = [&](size_t k) { std::memcpy(buf(r, k), in + k * seg * esize, segLen(k) * esize); };

  copyIn(0);
  barrier();
  for (size_t k = 0; k < nseg; ++k) {
    detail::Blocks blocks(segLen(k), p, std::max<size_t>(1, 64 / esize));
    const size_t off = blocks.begin(r) * esize, len = blocks.size(r);
    if (len > 0) {
      for (int q = 0; q < p; ++q) srcs[q] = buf(q, k) + off;
      kernels::reduceN(buf(r, k) + off, srcs, p, len, args.dtype, args.op);
    }
    if (k + 1 < nseg) copyIn(k + 1);
    barrier();
    unsigned char* dst = out + k * seg * esize;
    for (int i = 0; i < p; ++i) {
      const int q = (r + i) % p;  // own block first: it is in this core's cache
      const size_t qoff = blocks.begin(q) * esize, qlen = blocks.size(q) * esize;
      if (qlen == 0) continue;
      if (streaming) kernels::copyStreaming(dst + qoff, buf(q, k) + qoff, qlen);
      else std::memcpy(dst + qoff, buf(q, k) + qoff, qlen);
    }
  }
  barrier();
}

void run(Communicator& comm, const CollectiveArgs& args) {
  // No allocation on the small-message path for up to kStackRanks ranks.
  constexpr int kStackRanks = 32;
  const int p = comm.size();
  const void* stack_srcs[kStackRanks];
  std::vector<const void*> heap_srcs(p > kStackRanks ? p : 0);
  const void** srcs = p > kStackRanks ? heap_srcs.data() : stack_srcs;
  detail::ArenaView view(comm);
  if (args.count * args.elementSize() <= std::min(view.halfBytes(), kOneSegmentBytes)) {
    runOneSegment(comm, args, srcs);
  } else {
    runPipelined(comm, args, srcs);
  }
}

}  // namespace

extern const Algorithm kAllreduceShm = {
    "shm", Collective::kAllreduce,
    "reduce-scatter and allgather through the shared-memory arena, in cache-sized segments; "
    "needs every member on this host",
    supports, estimate, run};

}  // namespace perseus::collectives
