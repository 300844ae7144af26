// Note [Shared-memory allreduce]
// All members on one host. Three schemes, by size:
//
// Tiny (<= 56 bytes, Note [One-barrier small allreduce] below): one barrier.
//
// Small (<= 64 KiB, one segment): each rank copies its input into its own slot half; barrier;
// rank r reduces sub-block r across every slot and pushes the result into every slot;
// barrier; each rank copies the whole result out of its own slot. Two barriers.
//
// Large (pipelined): the vector is processed in segments of at most 256 KiB per thread
// (Note [Reduce threads]), so the working set stays in L2 whatever the vector size. Slot
// buffers k % 5 hold segment k (Note [Pipeline lag], common/reduce_threads.h: L = 2). Per
// segment, sub-block q belongs to rank q:
//   copy-in   rank r copies the sub-blocks q != r of its input segment into its buffer (its
//             own sub-block is never staged: only r reads it, straight from the input);
//   barrier;
//   reduce    rank r combines sub-block r of its input with sub-block r of every peer's
//             buffer, in rank order, in L1-sized chunks; each chunk goes to its own buffer
//             (for the peers) and to its output; then it copies in segment k+1;
//   barrier;
//   pull      rank r copies sub-blocks q != r of segment k out of rank q's buffer.
// Step k pulls segment k-L, reduces segment k and stages segment k+L, so a peer reads what
// was written L steps earlier, out of the shared L3 rather than the writer's L2; n segments
// take n + L + 1 barriers. Every element is reduced by one rank only, so all ranks get
// the same bits. Memory traffic is one read of the input and one write of the output (the
// memcpy floor of bench/floor_probe_bench); large outputs out of place are written with
// non-temporal stores (no read-for-ownership). What goes into the slots for the peers (the staged
// sub-blocks and the reduced results) is written with cached or streaming stores, as Note [Slot
// stores] (slot_stores.h) picks per call; with streaming stores the reducer works in an L1 scratch
// chunk, not in its slot. Per rank and byte the caches see 2.5 reads and 2 writes, against 3 and
// 2.5 when every byte is staged, reduced from the slots and copied out. Peers' slots are only
// touched between barriers, as Note [Arena slot discipline] (arena_view.h) requires.
//
// Note [Reduce threads]
// One core's copy bandwidth bounds the pipelined scheme, so on hosts with cores to spare each
// rank splits every step among T threads (PERSEUS_REDUCE_THREADS; auto = the process's CPUs
// over the host's ranks, at most 8; reduce_threads.h): a step -- pull segment k-1, reduce
// segment k, stage segment k+1 -- is one fork-join on the process's WorkerPool, and part t
// does piece t of every sub-block in each of the three. The segment grows to T x 256 KiB, so
// each thread's share stays L2-sized and the fork-join (~1-2 µs) stays small against it; T
// drops when the slot's buffers or the message cannot give every thread 64 KiB. Only
// the calling thread passes barriers, and parts run strictly between two barriers, so the
// slot discipline is unchanged; every element is still reduced by one rank, in rank order,
// whatever thread does it, so all ranks still get the same bits. Workers fence their
// non-temporal stores before they report done. T = 1 runs everything on the caller, exactly
// the single-threaded scheme.
//
// Note [Scaled shm allreduce]
// A postscale (Average = Sum x 1/n) is applied by whoever reduces an element, to the reduced
// chunk while it is in L1 and before it is pushed to the peers: no pass over the output, so
// the engine runs a scaled tensor as one call instead of in cache-sized pieces (Note
// [Cache-sized pieces]). The bits are those of reducing and then scaling.
//
// Note [One-barrier small allreduce]
// Rank r writes its input into its line (group, seq % 2) with the sequence number seq (its
// count of tiny allreduces on this group), passes one barrier, and then every rank reads
// every member's line and reduces them in rank order itself (same inputs, same order: same
// bits everywhere). No result has to travel back, so one barrier suffices; the two lines per
// rank let a fast rank start operation seq + 1 while a slow one still reads seq (the line
// discipline in arena_view.h). A line whose sequence number differs from this rank's means
// the members ran different operations on this group: a MismatchError, never a wrong sum.
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "collectives/arena_view.h"
#include "collectives/cost_model.h"
#include "collectives/detail.h"
#include "collectives/registry.h"
#include "collectives/slot_stores.h"
#include "common/reduce_threads.h"
#include "common/worker_pool.h"
#include "kernels/reduce.h"

namespace perseus::collectives {
namespace {

// Out of place the output's lines are not in cache: writing them with cached stores first
// reads them from memory and then pushes the inputs out of this process's share of L3, so
// outputs from 4 MiB are streamed (the size from which streaming won in interleaved pairs of
// `bench/collectives_bench --ops allreduce`). In place the output's lines are the input's,
// read moments before (the reducer's own block in the same step, the pulled blocks when they
// were staged, L steps earlier) and still cached: a cached store hits them, and a streaming
// one must first evict them. So in place never streams, at any size.
constexpr size_t kStreamingOutOfPlaceBytes = 4u << 20;
// Up to this size the single-segment scheme (two barriers, results pushed) runs.
constexpr size_t kOneSegmentBytes = 64 * 1024;
// Reduced chunks stay in L1 between the reduction and the copy to the output.
constexpr size_t kChunkBytes = 16 * 1024;
// No allocation on any path for up to this many ranks.
constexpr int kStackRanks = 32;

bool isTiny(const Communicator& comm, const CollectiveArgs& args) {
  return args.totalBytes() <= detail::SmallLine::kPayloadBytes &&
         detail::ArenaView::hasLines(*comm.arena());
}

bool supports(const Communicator& comm, const CollectiveArgs& args) {
  return args.op != ReduceOp::kAdasum && comm.arena() != nullptr &&
         detail::ArenaView::dataBytesOf(*comm.arena()) / 3 >= 64 * 16;
}

double estimate(const Communicator& comm, const CollectiveArgs& args) {
  if (isTiny(comm, args)) return cost::kBarrierUs;
  size_t bytes = args.totalBytes();
  size_t seg = reduce_threads::segmentBytes(
      1, detail::ArenaView::dataBytesOf(*comm.arena()) / reduce_threads::kPipelineBuffers);
  double segments = static_cast<double>((bytes + seg - 1) / seg);
  return (segments + reduce_threads::kPipelineLag + 1) * cost::kBarrierUs +
         2.5 * bytes * cost::kArenaUsPerByte;
}

void runTiny(Communicator& comm, const CollectiveArgs& args, const void** srcs) {
  detail::ArenaView view(comm);
  const int p = comm.size(), r = comm.rank();
  const size_t bytes = args.totalBytes();
  // Only this rank writes its lines: relaxed loads see its own last stores.
  const uint64_t seq = std::max(view.line(r, 0)->seq.load(std::memory_order_relaxed),
                                view.line(r, 1)->seq.load(std::memory_order_relaxed)) +
                       1;
  const int parity = static_cast<int>(seq % 2);
  detail::SmallLine* mine = view.line(r, parity);
  std::memcpy(mine->payload, args.in, bytes);
  mine->seq.store(seq, std::memory_order_relaxed);  // the barrier publishes it
  view.barrier();
  for (int q = 0; q < p; ++q) {
    const detail::SmallLine* line = view.line(q, parity);
    const uint64_t theirs = line->seq.load(std::memory_order_relaxed);
    if (theirs != seq) {
      throw MismatchError(PERSEUS_STR(
          "shared-memory allreduce of "
          << bytes << " bytes on group " << comm.groupId() << ": rank " << comm.globalRank(q)
          << " is at small operation " << theirs << " of this group but rank " << comm.globalRank(r)
          << " at " << seq << "; the members ran different collectives on this process set"));
    }
    srcs[q] = line->payload;
  }
  kernels::reduceN(args.out, srcs, p, args.count, args.dtype, args.op);
  if (args.postscale != 1.0) kernels::scale(args.out, args.count, args.dtype, args.postscale);
}

// One segment (small vectors): the reducer pushes its result into every slot, so the copy-out
// reads only the own slot and two barriers suffice.
void runOneSegment(Communicator& comm, const CollectiveArgs& args, const void** srcs) {
  detail::ArenaView view(comm);
  const int p = comm.size(), r = comm.rank();
  const size_t esize = args.elementSize(), n = args.count;
  SlotWriter slot_writer(comm, Collective::kAllreduce, n * esize);
  slot_writer.copy(view.half(r, 0), args.in, n * esize);
  slot_writer.publish();
  view.barrier();
  slot_writer.startClock();
  detail::Blocks blocks(n, p, std::max<size_t>(1, 64 / esize));
  const size_t off = blocks.begin(r) * esize, len = blocks.size(r);
  if (len > 0) {
    for (int q = 0; q < p; ++q) srcs[q] = view.half(q, 0) + off;
    unsigned char* mine = view.half(r, 0) + off;
    kernels::reduceN(mine, srcs, p, len, args.dtype, args.op);
    if (args.postscale != 1.0) kernels::scale(mine, len, args.dtype, args.postscale);
    for (int q = 0; q < p; ++q) {
      if (q != r) slot_writer.copy(view.half(q, 0) + off, mine, len * esize);
    }
  }
  slot_writer.publish();
  slot_writer.barrier(view, true);
  std::memcpy(args.out, view.half(r, 0), n * esize);
}

// Rank r's part of segment k (Note [Shared-memory allreduce]): `own` is sub-block r of its
// input, `slots[q]` sub-block r of rank q's buffer (slots[r] receives the result), `out`
// sub-block r of its output. Chunk by chunk so each reduced chunk is still in L1 when it is
// copied to the output. `own` may alias `out`: a chunk is read before it is written.
void reduceOwnBlock(const CollectiveArgs& args, int p, int r, const unsigned char* own,
                    unsigned char* const* slots, unsigned char* out, size_t len, bool streaming,
                    const SlotWriter& slot_writer, const void** srcs) {
  const size_t esize = args.elementSize();
  const size_t chunk = kChunkBytes / esize;
  alignas(64) unsigned char scratch[kChunkBytes];
  for (size_t i = 0; i < len; i += chunk) {
    const size_t m = std::min(chunk, len - i), off = i * esize;
    for (int q = 0; q < p; ++q) srcs[q] = (q == r ? own : slots[q]) + off;
    unsigned char* red = slot_writer.streaming() ? scratch : slots[r] + off;
    kernels::reduceN(red, srcs, p, m, args.dtype, args.op);
    if (args.postscale != 1.0) kernels::scale(red, m, args.dtype, args.postscale);
    if (slot_writer.streaming()) slot_writer.copy(slots[r] + off, red, m * esize);
    if (streaming)
      kernels::copyNonTemporal(out + off, red, m * esize);
    else
      std::memcpy(out + off, red, m * esize);
  }
}

// Note [Agreed segments]
// The segment size sets how many barriers a pipelined allreduce passes, so every member must
// compute the same one. It comes from what the host's ranks share: the host's online CPUs (as
// the slot's size does, Note [Slot for reduce threads] in shm_local_group.cc), the host's rank
// count and PERSEUS_REDUCE_THREADS; never from this process's affinity or binding. Those differ
// between ranks that started at different times (an elastic job's survivors, bound as one of
// four ranks, and its newcomers, bound as one of two): segments sized from them made the ranks
// pass different numbers of barriers, and every membership of those ranks timed out in the
// same allreduce again. A rank then splits each segment among as many of those threads as its
// own CPUs give it.

// Threads whose shares make up one segment of a pipelined allreduce of `bytes`: the same in
// every member (Note [Agreed segments]).
int segmentThreads(const Communicator& comm, size_t bytes, size_t buffer) {
  if (comm.size() > kStackRanks) return 1;  // the parts keep their pointer arrays on the stack
  static const int online = static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
  const int requested = reduce_threads::requestedReduceThreads(comm.params().reduce_threads, online,
                                                               comm.arena()->localSize());
  return reduce_threads::effectiveReduceThreads(requested, bytes, buffer);
}

// Threads this rank splits a segment of `segment_threads` shares among (Note [Reduce threads]):
// no more than its own CPUs give it.
int ownThreads(const Communicator& comm, int segment_threads) {
  return std::max(1, std::min(detail::ownReduceThreads(comm), segment_threads));
}

void runPipelined(Communicator& comm, const CollectiveArgs& args, const void** big_srcs,
                  unsigned char** big_slots) {
  detail::ArenaView view(comm);
  const int p = comm.size(), r = comm.rank();
  const size_t esize = args.elementSize();
  constexpr size_t kLag = reduce_threads::kPipelineLag, kBuffers = reduce_threads::kPipelineBuffers;
  const size_t buffer = (view.dataBytes() / kBuffers) & ~size_t{63};
  const int shares = segmentThreads(comm, args.totalBytes(), buffer);
  const size_t seg = reduce_threads::segmentBytes(shares, buffer) / esize;
  const int threads = ownThreads(comm, shares);
  const size_t nseg = (args.count + seg - 1) / seg;
  const bool streaming = args.in != args.out && args.count * esize >= kStreamingOutOfPlaceBytes;
  SlotWriter slot_writer(comm, Collective::kAllreduce, args.totalBytes());
  const bool fence = streaming || slot_writer.streaming();
  const auto* in = detail::bytePtr(args.in);
  auto* out = detail::bytePtr(args.out);
  const size_t align = std::max<size_t>(1, 64 / esize);
  auto buf = [&](int q, size_t k) { return view.data(q) + (k % kBuffers) * buffer; };
  auto segLen = [&](size_t k) { return std::min(seg, args.count - k * seg); };
  // Part t's piece of sub-block q of segment k: byte offset in the segment, byte length.
  auto piece = [&](const detail::Blocks& blocks, int q, int t) {
    detail::Blocks pieces(blocks.size(q), threads, align);
    return std::make_pair((blocks.begin(q) + pieces.begin(t)) * esize, pieces.size(t) * esize);
  };
  auto copyOut = [&](unsigned char* dst, const unsigned char* src, size_t len) {
    if (streaming)
      kernels::copyNonTemporal(dst, src, len);
    else
      std::memcpy(dst, src, len);
  };
  auto copyIn = [&](size_t k, int t) {
    detail::Blocks blocks(segLen(k), p, align);
    const unsigned char* src = in + k * seg * esize;
    for (int q = 0; q < p; ++q) {
      auto [off, len] = piece(blocks, q, t);
      if (q != r && len > 0) slot_writer.copy(buf(r, k) + off, src + off, len);
    }
  };
  auto reduce = [&](size_t k, int t) {
    detail::Blocks blocks(segLen(k), p, align);
    auto [off, len] = piece(blocks, r, t);
    if (len == 0) return;
    const void* stack_srcs[kStackRanks];
    unsigned char* stack_slots[kStackRanks];
    const void** srcs = p > kStackRanks ? big_srcs : stack_srcs;  // then threads == 1
    unsigned char** slots = p > kStackRanks ? big_slots : stack_slots;
    const size_t base = k * seg * esize;
    for (int q = 0; q < p; ++q) slots[q] = buf(q, k) + off;
    reduceOwnBlock(args, p, r, in + base + off, slots, out + base + off, len / esize, streaming,
                   slot_writer, srcs);
  };
  auto pull = [&](size_t k, int t) {
    detail::Blocks blocks(segLen(k), p, align);
    const size_t base = k * seg * esize;
    for (int i = 1; i < p; ++i) {
      const int q = (r + i) % p;  // start with different peers so no slot is read by all
      auto [off, len] = piece(blocks, q, t);
      if (len > 0) copyOut(out + base + off, buf(q, k) + off, len);
    }
  };
  WorkerPool& pool = WorkerPool::instance();
  const int64_t spin_us = comm.params().spin_us;

  auto first = [&](int t) {
    for (size_t k = 0; k < kLag && k < nseg; ++k) copyIn(k, t);
    if (t > 0) slot_writer.publish();
  };
  pool.run(threads, first, spin_us);
  slot_writer.publish();
  // The first barrier carries the segment: a member that sized it differently (Note [Agreed
  // segments]) would pass a different number of barriers, which ends in a timeout; this ends
  // in an error that says so.
  const uint64_t widest = view.barrierMax(seg);
  if (widest != seg) {
    throw MismatchError(PERSEUS_STR(
        "shared-memory allreduce: this rank cuts the vector into segments of "
        << seg << " elements, another member into " << widest
        << "; members must size segments alike (Note [Agreed segments] in allreduce_shm.cc), so "
           "this is a Perseus defect: please report it with the ranks' PERSEUS_REDUCE_THREADS "
           "and CPU affinity"));
  }
  slot_writer.startClock();
  // Step k: pull segment k-kLag, reduce segment k, stage segment k+kLag; then a barrier. The
  // three touch different buffers (mod kBuffers = 2 kLag + 1), so parts may interleave them
  // freely; a buffer is staged again (step k + kLag + 1) only after its pulls (step k + kLag)
  // and the barrier that ends them.
  for (size_t k = 0; k < nseg + kLag; ++k) {
    auto step = [&](int t) {
      if (k >= kLag) pull(k - kLag, t);
      if (k < nseg) reduce(k, t);
      if (k + kLag < nseg) copyIn(k + kLag, t);
      // A worker's streamed stores must be visible before it reports the part done.
      if (fence && t > 0) kernels::nonTemporalFence();
    };
    pool.run(threads, step, spin_us);
    if (fence) kernels::nonTemporalFence();
    slot_writer.barrier(view, k + 1 == nseg + kLag);
  }
}

void run(Communicator& comm, const CollectiveArgs& args) {
  const int p = comm.size();
  const void* stack_srcs[kStackRanks];
  std::vector<const void*> heap_srcs(p > kStackRanks ? p : 0);
  const void** srcs = p > kStackRanks ? heap_srcs.data() : stack_srcs;
  const size_t bytes = args.totalBytes();
  if (isTiny(comm, args)) {
    runTiny(comm, args, srcs);
  } else if (bytes <=
             std::min(detail::ArenaView::dataBytesOf(*comm.arena()) / 2, kOneSegmentBytes)) {
    runOneSegment(comm, args, srcs);
  } else {
    unsigned char* stack_slots[kStackRanks];
    std::vector<unsigned char*> heap_slots(p > kStackRanks ? p : 0);
    runPipelined(comm, args, srcs, p > kStackRanks ? heap_slots.data() : stack_slots);
  }
}

}  // namespace

extern const Algorithm kAllreduceShm = {
    "shm",
    Collective::kAllreduce,
    "reduce-scatter and allgather through the shared-memory arena, in cache-sized segments; "
    "needs every member on this host",
    supports,
    estimate,
    run};

}  // namespace perseus::collectives
