// Note [Single-copy allreduce]
// All members on one host, each with one core to itself. Every member publishes its input and
// its output (single_copy.h), then, after a barrier:
//   reduce   member r owns block r of the vector: it copies each peer's block r of their
//            input straight out of their memory, kChunkBytes at a time into scratch, and
//            combines the chunks with its own in rank order into block r of its output,
//            applying the postscale to the chunk while it is in L1;
//   barrier;
//   gather   member r copies every other block q straight out of member q's output into its
//            own output;
//   barrier: no member touches its buffers until every member has read them.
// Per rank and byte the memory sees 2(p-1)/p single-copy reads and one pass over its own
// block, where the slot pipeline (Note [Shared-memory allreduce]) stages, reduces and pulls
// every byte through the slots. Every element is reduced by one member, in rank order, so all
// members get the same bits. In place, a member writes only block r of its buffer while the
// peers read its other blocks, and they read block r only after the barrier that follows.
//
// It runs in place only: the block a peer reads in the gather was written moments before in
// the reduce, and is read from the cache. Out of place the output's lines are not in cache, so
// the reduce writes the block to memory and the peer reads it from there, while the slot
// pipeline streams its output (measured slower from 4 MiB on: `perseus_collectives_bench sweep`
// with PERSEUS_ALLREDUCE_ALGO=single-copy against =shm, its out-of-place rows). A
// member cannot tell from the call whether its peers run in place, so after the first barrier
// each reads what the others published, and unless all run in place they all take the slot
// algorithm for this call, after one more barrier (it writes where they published).
//
// A member that cannot read its peers' memory (the system forbids cross-memory attach, or
// PERSEUS_SHM_SINGLE_COPY=0 there) has no other way to the blocks, and in place its input is
// overwritten once it reduces. So before the first reduce on a communicator every member reads
// a word of every peer's input and the members agree, by a barrierMax, that all of them could:
// else all of them run the slot algorithm instead, then and in every later call
// (single_copy::fallBack). A read that fails after that is an error of the call.
//
// With cores to spare, the slot pipeline splits every step among reduce threads (Note [Reduce
// threads]) and outruns this one-thread reduce, so it is offered only to members with one
// reduce thread each: ranks as many as the host's cores, or PERSEUS_REDUCE_THREADS=1.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "collectives/arena_view.h"
#include "collectives/cost_model.h"
#include "collectives/detail.h"
#include "collectives/registry.h"
#include "collectives/single_copy.h"
#include "kernels/reduce.h"

namespace perseus::collectives {

extern const Algorithm kAllreduceShm;

namespace {

constexpr int kInput = 0, kOutput = 1;  // the buffers each member publishes
// Chunks from the peers stay in L2 between the read and the reduction.
constexpr size_t kChunkBytes = 128 * 1024;
constexpr int kStackRanks = 32;
// The sizes the cost model offers it at (PERSEUS_ALLREDUCE_ALGO=single-copy runs it at any),
// from timing it against the slot pipeline alternated call by call, and from Python, where the
// ranks reach a call at different times: below 2 MiB the slot pipeline, which starts staging
// before the last rank arrives, is as fast or faster; above 16 MiB the vector outgrows what the
// caches keep from the reduce for the gather, and the slot pipeline, which keeps each segment
// cached from staging to pull, catches up.
constexpr size_t kMinBytes = 2u << 20;
constexpr size_t kMaxBytes = 16u << 20;

bool supports(const Communicator& comm, const CollectiveArgs& args) {
  return args.op != ReduceOp::kAdasum && comm.arena() != nullptr && !comm.singleCopyFailed() &&
         comm.size() <= kStackRanks && detail::ownReduceThreads(comm) == 1;
}

// Reads of (p-1)/p of the vector in chunks and of (p-1)/p in one read per peer, and a pass
// over this member's block.
double estimate(const Communicator& comm, const CollectiveArgs& args) {
  if (args.totalBytes() < kMinBytes || args.totalBytes() > kMaxBytes)
    return std::numeric_limits<double>::infinity();
  const int p = comm.size();
  const double bytes = static_cast<double>(args.totalBytes());
  const double block = bytes / p;
  const double reads = (p - 1) * (std::ceil(block / kChunkBytes) + 1);
  return 3 * cost::kBarrierUs + reads * cost::kCrossMemoryUs +
         2 * (bytes - block) * cost::kCrossMemoryUsPerByte + block * cost::kArenaUsPerByte;
}

// Whether every member's output is its input: read from what they published, so all members
// agree. Out of place, a large output's lines are not in cache, and both phases would write
// them from memory (and a peer would read the reduced block from memory too): there the slot
// pipeline, which streams its output, is faster.
bool everyMemberInPlace(const Communicator& comm, const detail::ArenaView& view) {
  for (int q = 0; q < comm.size(); ++q) {
    if (!single_copy::publishedInPlace(view, q)) return false;
  }
  return true;
}

// Block r of the output: the members' block r, chunk by chunk; 0 or the errno of a read.
int reduceOwnBlock(Communicator& comm, const detail::ArenaView& view, const CollectiveArgs& args,
                   const detail::Blocks& blocks) {
  const int p = comm.size(), r = comm.rank();
  const size_t es = args.elementSize();
  const size_t chunk = kChunkBytes / es;
  auto* scratch = static_cast<unsigned char*>(comm.scratch(0, (p - 1) * kChunkBytes));
  const unsigned char* in = detail::bytePtr(args.in);
  unsigned char* out = detail::bytePtr(args.out);
  const void* srcs[kStackRanks];
  for (size_t at = blocks.begin(r), end = at + blocks.size(r); at < end; at += chunk) {
    const size_t n = std::min(chunk, end - at);
    for (int q = 0, slot = 0; q < p; ++q) {
      if (q == r) {
        srcs[q] = in + at * es;
        continue;
      }
      unsigned char* to = scratch + static_cast<size_t>(slot++) * kChunkBytes;
      if (const int err = single_copy::readRange(view, q, kInput, at * es, to, n * es)) return err;
      srcs[q] = to;
    }
    kernels::reduceN(out + at * es, srcs, p, n, args.dtype, args.op);
    if (args.postscale != 1.0) kernels::scale(out + at * es, n, args.dtype, args.postscale);
  }
  return 0;
}

// Blocks q != r of the output, from the members that reduced them; 0 or the errno of a read.
int gatherBlocks(Communicator& comm, const detail::ArenaView& view, const CollectiveArgs& args,
                 const detail::Blocks& blocks) {
  const int p = comm.size();
  const size_t es = args.elementSize();
  std::vector<size_t> at(static_cast<size_t>(p)), bytes(at.size());
  for (int q = 0; q < p; ++q) {
    at[q] = blocks.begin(q) * es;
    bytes[q] = blocks.size(q) * es;
  }
  return single_copy::readPeers(comm, view, kOutput, detail::bytePtr(args.out), at, at, bytes);
}

void run(Communicator& comm, const CollectiveArgs& args) {
  detail::ArenaView view(comm);
  single_copy::publish(view, comm.rank(), args.in, args.out);
  view.barrier();
  if (!everyMemberInPlace(comm, view)) {
    view.barrier();  // the slot algorithm writes where the members published
    kAllreduceShm.run(comm, args);
    return;
  }
  int err = 0;
  if (!single_copy::agreed(comm, view, kInput, &err))
    return single_copy::fallBack(comm, args, kAllreduceShm, err);
  const detail::Blocks blocks(args.count, comm.size(),
                              std::max<size_t>(1, 64 / args.elementSize()));
  err = reduceOwnBlock(comm, view, args, blocks);
  if (view.barrierMax(err != 0 ? 1 : 0) != 0)
    single_copy::failedAfterAgreement(comm, err, "allreduce", "large allreduces");
  err = gatherBlocks(comm, view, args, blocks);
  if (view.barrierMax(err != 0 ? 1 : 0) != 0)
    single_copy::failedAfterAgreement(comm, err, "allreduce", "large allreduces");
}

}  // namespace

extern const Algorithm kAllreduceSingleCopy = {
    "single-copy",
    Collective::kAllreduce,
    "each member reduces its block from the peers' inputs and copies the others' blocks from "
    "their outputs, straight out of their memory (cross-memory attach); needs every member on "
    "this host, one reduce thread each",
    supports,
    estimate,
    run};

}  // namespace perseus::collectives
