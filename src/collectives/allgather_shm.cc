// Allgatherv through the shared-memory arena: in round k every rank copies piece k of its
// block into its own slot half k % 2, then, after a barrier, copies every peer's piece k out
// of the peers' slots (Note [Arena slot discipline], arena_view.h). n rounds, n + 1 barriers.
#include <algorithm>
#include <cstring>

#include "collectives/arena_view.h"
#include "collectives/cost_model.h"
#include "collectives/detail.h"
#include "collectives/registry.h"
#include "collectives/slot_stores.h"

namespace perseus::collectives {
namespace {

bool supports(const Communicator& comm, const CollectiveArgs&) { return comm.arena() != nullptr; }

double estimate(const Communicator& comm, const CollectiveArgs& args) {
  size_t half = detail::ArenaView::dataBytesOf(*comm.arena()) / 2;
  size_t largest = *std::max_element(args.sizes->begin(), args.sizes->end());
  double rounds = static_cast<double>((largest + half - 1) / half);
  return (rounds + 1) * cost::kBarrierUs + 2.0 * args.totalBytes() * cost::kArenaUsPerByte;
}

void run(Communicator& comm, const CollectiveArgs& args) {
  detail::ArenaView view(comm);
  const int p = comm.size(), r = comm.rank();
  const auto& bytes = *args.sizes;
  const auto off = detail::offsetsOf(bytes);
  const size_t piece = view.halfBytes();
  const size_t largest = *std::max_element(bytes.begin(), bytes.end());
  const size_t rounds = (largest + piece - 1) / piece;
  auto* out = detail::bytePtr(args.out);
  const auto* in = detail::bytePtr(args.in);
  SlotWriter slot_writer(comm, Collective::kAllgatherv, args.totalBytes());

  auto pieceOf = [&](int q, size_t k) {
    size_t begin = std::min(bytes[q], k * piece);
    return std::make_pair(begin, std::min(bytes[q], begin + piece) - begin);
  };
  auto copyIn = [&](size_t k) {
    auto [begin, len] = pieceOf(r, k);
    if (len > 0) slot_writer.copy(view.half(r, k % 2), in + begin, len);
    slot_writer.publish();
  };
  copyIn(0);
  view.barrier();
  slot_writer.startClock();
  for (size_t k = 0; k < rounds; ++k) {
    for (int q = 0; q < p; ++q) {
      auto [begin, len] = pieceOf(q, k);
      if (len == 0) continue;
      const unsigned char* src = q == r ? in + begin : view.half(q, k % 2);
      if (out + off[q] + begin != src) std::memmove(out + off[q] + begin, src, len);
    }
    if (k + 1 < rounds) copyIn(k + 1);
    slot_writer.barrier(view, k + 1 == rounds);
  }
}

}  // namespace

extern const Algorithm kAllgathervShm = {
    "shm",
    Collective::kAllgatherv,
    "through the shared-memory arena in slot-sized rounds; needs every member on this host",
    supports,
    estimate,
    run};

}  // namespace perseus::collectives
