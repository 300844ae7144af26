// Private to src/collectives: a communicator's view of the shared-memory arena.
//
// Note [Arena slot discipline]
// Slots are shared by every communicator of the host (each rank has one slot), and ranks run
// collectives of different communicators in different orders. What keeps them apart:
//   1. Before an operation's first barrier a rank touches only its own slot.
//   2. Peers' slots are read or written only between the operation's first and last barrier,
//      when every member is inside the same operation.
//   3. After the last barrier a rank touches only its own slot.
// So a slot is never used by two communicators' operations at once, and no trailing barrier
// or per-group memory is needed. Within an operation, segment k uses slot half k % 2 so that
// copying segment k+1 in overlaps with peers still reading segment k (a half is rewritten only
// after a barrier that every reader of its previous content has passed).
#pragma once

#include <cstddef>

#include "collectives/communicator.h"
#include "common/status.h"

namespace perseus::collectives::detail {

class ArenaView {
 public:
  explicit ArenaView(Communicator& comm) : comm_(comm), arena_(comm.arena()) {
    PERSEUS_CHECK(arena_ != nullptr, "shared-memory algorithm on a communicator without arena");
    half_bytes_ = (arena_->slotBytes() / 2) & ~size_t{63};
  }
  // Bytes in each half of a slot (a multiple of 64).
  size_t halfBytes() const { return half_bytes_; }
  // Communicator rank `set_rank`'s slot half `h` (0 or 1).
  unsigned char* half(int set_rank, int h) const {
    return static_cast<unsigned char*>(arena_->slot(comm_.arenaRank(set_rank))) +
           static_cast<size_t>(h) * half_bytes_;
  }
  void barrier() const { arena_->barrier(comm_.groupId(), comm_.arenaMembers()); }

 private:
  Communicator& comm_;
  transport::ShmArena* arena_;
  size_t half_bytes_;
};

}  // namespace perseus::collectives::detail
