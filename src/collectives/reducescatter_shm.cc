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
#include <algorithm>
#include <cstring>

#include "collectives/arena_view.h"
#include "collectives/cost_model.h"
#include "collectives/detail.h"
#include "collectives/registry.h"
#include "collectives/slot_stores.h"
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
  std::vector<const void*> srcs(p);
  SlotWriter slot_writer(comm, Collective::kReducescatterv, args.totalBytes());

  auto pieceLen = [&](int q, size_t k) {
    size_t begin = std::min(counts[q], k * c);
    return std::min(counts[q], begin + c) - begin;
  };
  auto copyIn = [&](size_t k) {
    for (int q = 0; q < p; ++q) {
      size_t n = pieceLen(q, k);
      if (n > 0)
        slot_writer.copy(view.half(r, k % 2) + q * c * esize, in + off[q] + k * c * esize,
                         n * esize);
    }
    slot_writer.publish();
  };
  copyIn(0);
  view.barrier();
  slot_writer.startClock();
  for (size_t k = 0; k < rounds; ++k) {
    size_t n = pieceLen(r, k);
    if (n > 0) {
      for (int q = 0; q < p; ++q) srcs[q] = view.half(q, k % 2) + r * c * esize;
      kernels::reduceN(out + k * c * esize, srcs.data(), p, n, args.dtype, args.op);
      if (args.postscale != 1.0) kernels::scale(out + k * c * esize, n, args.dtype, args.postscale);
    }
    if (k + 1 < rounds) copyIn(k + 1);
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
