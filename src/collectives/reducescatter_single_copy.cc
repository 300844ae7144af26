// Note [Single-copy reduce-scatter]
// All members on one host, each with one core to itself. Every member publishes its input
// (single_copy.h), then, after a barrier, member r reduces its own block: it copies each
// peer's block r straight out of their input, kChunkBytes at a time into scratch, and combines
// the chunks with its own block r in rank order into its output, applying the postscale while
// the chunk is in L1. A closing barrierMax keeps every input unchanged until all members have
// read it, and tells every member if one could not read.
//
// Per rank and byte of its block the memory sees p - 1 single-copy reads into cache and one
// pass over its own block, where the slot rounds (Note [Shared-memory allreduce]'s discipline,
// reducescatter_shm.cc) copy every byte of the input into the slots and then reduce the block
// out of them: about 1.25 passes over the input at 2 members against 2. Every element is reduced
// by one member, in rank order, so the bits are those of the slot algorithm. The output may
// alias this member's block of its input: the peers read only their own blocks of it.
//
// It is the first half of the single-copy allreduce (Note [Single-copy allreduce]), with the
// same agreement before the first read on a communicator (a word of every peer's input, then a
// barrierMax; else all members fall back to the slots for good) and the same condition: offered
// only to members with one reduce thread each, since with cores to spare the slot rounds split
// among reduce threads (Note [Reduce-scatter threads]).
#include <algorithm>
#include <cmath>
#include <limits>

#include "collectives/arena_view.h"
#include "collectives/cost_model.h"
#include "collectives/detail.h"
#include "collectives/registry.h"
#include "collectives/single_copy.h"
#include "kernels/reduce.h"

namespace perseus::collectives {

extern const Algorithm kReducescattervShm;

namespace {

constexpr int kInput = 0;  // the buffer each member publishes
// Chunks from the peers stay in L2 between the read and the reduction.
constexpr size_t kChunkBytes = 128 * 1024;
constexpr int kStackRanks = 32;

bool supports(const Communicator& comm, const CollectiveArgs& args) {
  return args.op != ReduceOp::kAdasum && comm.arena() != nullptr && !comm.singleCopyFailed() &&
         comm.size() <= kStackRanks && detail::ownReduceThreads(comm) == 1;
}

// Per peer, one read per chunk of the largest block and that block's bytes; one pass over the
// block. The slot rounds' estimate (reducescatter_shm.cc) counts two passes over the input.
double estimate(const Communicator& comm, const CollectiveArgs& args) {
  const auto& counts = *args.sizes;
  const double block =
      static_cast<double>(*std::max_element(counts.begin(), counts.end()) * args.elementSize());
  const int p = comm.size();
  const double reads = (p - 1) * std::ceil(block / kChunkBytes);
  return 2 * cost::kBarrierUs + reads * cost::kCrossMemoryUs +
         (p - 1) * block * cost::kCrossMemoryUsPerByte + block * cost::kArenaUsPerByte;
}

// This member's block of the result, chunk by chunk; 0 or the errno of a read.
int reduceOwnBlock(Communicator& comm, const detail::ArenaView& view, const CollectiveArgs& args) {
  const int p = comm.size(), r = comm.rank();
  const size_t es = args.elementSize();
  const size_t chunk = kChunkBytes / es;
  const auto& counts = *args.sizes;
  const size_t first = detail::offsetsOf(counts)[static_cast<size_t>(r)];
  const size_t count = counts[static_cast<size_t>(r)];
  auto* scratch = static_cast<unsigned char*>(comm.scratch(0, (p - 1) * kChunkBytes));
  const unsigned char* in = detail::bytePtr(args.in) + first * es;
  unsigned char* out = detail::bytePtr(args.out);
  const void* srcs[kStackRanks];
  for (size_t at = 0; at < count; at += chunk) {
    const size_t n = std::min(chunk, count - at);
    for (int q = 0, slot = 0; q < p; ++q) {
      if (q == r) {
        srcs[q] = in + at * es;
        continue;
      }
      unsigned char* to = scratch + static_cast<size_t>(slot++) * kChunkBytes;
      if (const int err = single_copy::readRange(view, q, kInput, (first + at) * es, to, n * es))
        return err;
      srcs[q] = to;
    }
    kernels::reduceN(out + at * es, srcs, p, n, args.dtype, args.op);
    if (args.postscale != 1.0) kernels::scale(out + at * es, n, args.dtype, args.postscale);
  }
  return 0;
}

void run(Communicator& comm, const CollectiveArgs& args) {
  detail::ArenaView view(comm);
  single_copy::publish(view, comm.rank(), args.in);
  view.barrier();
  int err = 0;
  if (!single_copy::agreed(comm, view, kInput, &err))
    return single_copy::fallBack(comm, args, kReducescattervShm, err);
  err = reduceOwnBlock(comm, view, args);
  if (view.barrierMax(err != 0 ? 1 : 0) != 0)
    single_copy::failedAfterAgreement(comm, err, "reduce-scatter", "reduce-scatters");
}

}  // namespace

extern const Algorithm kReducescattervSingleCopy = {
    "single-copy",
    Collective::kReducescatterv,
    "each member reduces its block from the peers' inputs, straight out of their memory "
    "(cross-memory attach); needs every member on this host, one reduce thread each",
    supports,
    estimate,
    run};

}  // namespace perseus::collectives
