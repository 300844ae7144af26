// Reduce-scatterv through the shared-memory arena. Round k: every rank copies piece k of
// every block q (c elements, c = half slot / p) to offset q*c of its own slot half k % 2;
// after a barrier rank r reduces piece k of block r across all slots straight into `out`,
// while copying in round k+1 (Note [Arena slot discipline], arena_view.h). n rounds, n + 1
// barriers. Rank r writes out[piece k] after every rank copied in round k, and `in`'s block r
// is not read after its piece was copied, so out may alias this rank's block of in.
//
// Note [Scaled shm reduce-scatter]: a postscale (Average = Sum x 1/n) is applied to each
// reduced piece while it is still in cache, not in a pass over the whole output afterwards;
// the bits are those of reducing and then scaling.
//
// Note [Reduce-scatter threads]: a rank with cores to spare (its share of the host's cores
// over the host's ranks, or PERSEUS_REDUCE_THREADS, as Note [Reduce threads] in
// allreduce_shm.cc counts them) splits each round, its reduce of piece k and its copy-in of
// round k+1, among that many threads of the process's WorkerPool, each taking an equal run of
// every piece, no run under kMinThreadShareBytes. Only the calling thread passes barriers and
// the parts run strictly between two of them, so the rounds, the barriers and the slot
// discipline are those of one thread; each element is still reduced by one thread in rank
// order, so the bits do not change. The count is this rank's own: it changes nothing its
// peers see.
#include <algorithm>
#include <cstring>
#include <vector>

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

size_t pieceElems(size_t half_bytes, int p, size_t esize) {
  size_t align = std::max<size_t>(1, 64 / esize);
  return half_bytes / static_cast<size_t>(p) / esize / align * align;
}

bool supports(const Communicator& comm, const CollectiveArgs& args) {
  return comm.arena() != nullptr &&
         pieceElems(detail::ArenaView::dataBytesOf(*comm.arena()) / 2 & ~size_t{63}, comm.size(),
                    args.elementSize()) > 0;
}

double estimate(const Communicator& comm, const CollectiveArgs& args) {
  size_t c = pieceElems(detail::ArenaView::dataBytesOf(*comm.arena()) / 2, comm.size(),
                        args.elementSize());
  size_t largest = *std::max_element(args.sizes->begin(), args.sizes->end());
  double rounds = static_cast<double>((largest + c - 1) / c);
  return (rounds + 1) * cost::kBarrierUs + 2.0 * args.totalBytes() * cost::kArenaUsPerByte;
}

// Threads this rank splits each round among (Note [Reduce-scatter threads]): no run of a
// `piece_bytes` piece under kMinThreadShareBytes.
int roundThreads(const Communicator& comm, size_t piece_bytes) {
  const int own = detail::ownReduceThreads(comm);
  const size_t fit = piece_bytes / reduce_threads::kMinThreadShareBytes;
  return static_cast<int>(std::max<size_t>(1, std::min<size_t>(static_cast<size_t>(own), fit)));
}

void run(Communicator& comm, const CollectiveArgs& args) {
  detail::ArenaView view(comm);
  const int p = comm.size(), r = comm.rank();
  const auto& counts = *args.sizes;
  const size_t esize = args.elementSize();
  const auto off = detail::offsetsOf(counts, esize);
  const size_t c = pieceElems(view.halfBytes(), p, esize);
  const size_t largest = *std::max_element(counts.begin(), counts.end());
  const size_t rounds = (largest + c - 1) / c;
  const auto* in = detail::bytePtr(args.in);
  auto* out = detail::bytePtr(args.out);
  SlotWriter slot_writer(comm, Collective::kReducescatterv, args.totalBytes());
  const int threads = roundThreads(comm, std::min(c, largest) * esize);
  const size_t align = std::max<size_t>(1, 64 / esize);
  std::vector<std::vector<const void*>> srcs(static_cast<size_t>(threads),
                                             std::vector<const void*>(static_cast<size_t>(p)));

  auto pieceLen = [&](int q, size_t k) {
    size_t begin = std::min(counts[q], k * c);
    return std::min(counts[q], begin + c) - begin;
  };
  // Part t's run [begin, begin + len) of an n-element piece.
  auto runOf = [&](size_t n, int t) {
    detail::Blocks runs(n, threads, align);
    return std::make_pair(runs.begin(t), runs.size(t));
  };
  auto copyIn = [&](size_t k, int t) {
    for (int q = 0; q < p; ++q) {
      auto [begin, len] = runOf(pieceLen(q, k), t);
      if (len > 0)
        slot_writer.copy(view.half(r, k % 2) + (q * c + begin) * esize,
                         in + off[q] + (k * c + begin) * esize, len * esize);
    }
  };
  auto reduce = [&](size_t k, int t) {
    auto [begin, len] = runOf(pieceLen(r, k), t);
    if (len == 0) return;
    const void** from = srcs[static_cast<size_t>(t)].data();
    for (int q = 0; q < p; ++q) from[q] = view.half(q, k % 2) + (r * c + begin) * esize;
    unsigned char* to = out + (k * c + begin) * esize;
    kernels::reduceN(to, from, p, len, args.dtype, args.op);
    if (args.postscale != 1.0) kernels::scale(to, len, args.dtype, args.postscale);
  };
  WorkerPool& pool = WorkerPool::instance();
  const int64_t spin_us = comm.params().spin_us;
  auto first = [&](int t) {
    copyIn(0, t);
    slot_writer.publish();  // every thread that copied fences its own streaming stores
  };
  pool.run(threads, first, spin_us);
  view.barrier();
  slot_writer.startClock();
  for (size_t k = 0; k < rounds; ++k) {
    auto step = [&](int t) {
      reduce(k, t);
      if (k + 1 < rounds) {
        copyIn(k + 1, t);
        slot_writer.publish();
      }
    };
    pool.run(threads, step, spin_us);
    slot_writer.barrier(view, k + 1 == rounds);
  }
}

}  // namespace

extern const Algorithm kReducescattervShm = {
    "shm",
    Collective::kReducescatterv,
    "through the shared-memory arena in slot-sized rounds; needs every member on this host",
    supports,
    estimate,
    run};

}  // namespace perseus::collectives
