// Broadcast through the shared-memory arena: the root copies segment k into its slot half
// k % 2; after a barrier the others copy it out while the root fills the other half
// (Note [Arena slot discipline], arena_view.h). n segments, n + 1 barriers.
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
  double segments = static_cast<double>((args.bytes + half - 1) / half);
  // The root copies segment k + 1 in while the others copy segment k out: one segment's copy
  // more than the data, not two copies of it.
  const double copied = static_cast<double>(args.bytes + std::min(args.bytes, half));
  return (segments + 1) * cost::kBarrierUs + copied * cost::kArenaUsPerByte;
}

void run(Communicator& comm, const CollectiveArgs& args) {
  detail::ArenaView view(comm);
  const bool root = comm.rank() == args.root;
  const size_t seg = view.halfBytes();
  const size_t nseg = (args.bytes + seg - 1) / seg;
  auto* data = detail::bytePtr(args.out);
  auto len = [&](size_t k) { return std::min(seg, args.bytes - k * seg); };
  // Only the root writes its slot, so only its time says anything about the stores.
  SlotWriter slot_writer = root ? SlotWriter(comm, Collective::kBroadcast, args.bytes)
                                : SlotWriter::readerOnly(comm, Collective::kBroadcast, args.bytes);
  if (root) slot_writer.copy(view.half(comm.rank(), 0), data, len(0));
  slot_writer.publish();
  view.barrier();
  slot_writer.startClock();
  for (size_t k = 0; k < nseg; ++k) {
    if (!root) {
      std::memcpy(data + k * seg, view.half(args.root, k % 2), len(k));
    } else if (k + 1 < nseg) {
      slot_writer.copy(view.half(comm.rank(), (k + 1) % 2), data + (k + 1) * seg, len(k + 1));
      slot_writer.publish();
    }
    slot_writer.barrier(view, k + 1 == nseg);
  }
}

}  // namespace

extern const Algorithm kBroadcastShm = {
    "shm",
    Collective::kBroadcast,
    "through the root's shared-memory slot, double-buffered; needs every member on this host",
    supports,
    estimate,
    run};

}  // namespace perseus::collectives
