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
//
// The exception is the per-group line area at the end of the slot (when the slot is large
// enough, see hasLines()): two 64-byte lines per group, written only by the slot's owner and
// only in operations of that group, so they may be read after the last barrier. Line t % 2
// carries operation t's data; it is rewritten by operation t + 2, which its owner can reach
// only after every member has passed operation t + 1's barrier, i.e. after every member has
// finished reading operation t (Note [One-barrier small allreduce], allreduce_shm.cc).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "collectives/communicator.h"
#include "common/status.h"

namespace perseus::collectives::detail {

// One rank's line of the small-message path: a sequence number (operations of this group so
// far on this rank) and the payload.
struct alignas(64) SmallLine {
  static constexpr size_t kPayloadBytes = 56;
  std::atomic<uint64_t> seq;
  unsigned char payload[kPayloadBytes];
};
static_assert(sizeof(SmallLine) == 64, "one cache line");

// The line area at the end of a slot: two lines per group.
constexpr size_t kLinesBytes = transport::ShmArena::kMaxGroups * 2 * sizeof(SmallLine);

// Local rank `local_rank`'s line `parity` (0 or 1) of group `group`, in its slot's line area.
// Valid only when ArenaView::hasLines(arena).
inline SmallLine* groupLine(transport::ShmArena& arena, int local_rank, int group, int parity) {
  auto* base = static_cast<unsigned char*>(arena.slot(local_rank)) +
               ((arena.slotBytes() - kLinesBytes) & ~size_t{63});
  return reinterpret_cast<SmallLine*>(base) + group * 2 + parity;
}

class ArenaView {
 public:
  explicit ArenaView(Communicator& comm) : comm_(comm), arena_(comm.arena()) {
    PERSEUS_CHECK(arena_ != nullptr, "shared-memory algorithm on a communicator without arena");
    data_bytes_ = dataBytesOf(*arena_);
    half_bytes_ = (data_bytes_ / 2) & ~size_t{63};
  }
  // Slots of at least twice the line area keep one; smaller ones are all data.
  static bool hasLines(const transport::ShmArena& arena) {
    return arena.slotBytes() >= 2 * kLinesBytes;
  }
  // Bytes at the start of each slot for segment data (a multiple of 64).
  static size_t dataBytesOf(const transport::ShmArena& arena) {
    return (arena.slotBytes() - (hasLines(arena) ? kLinesBytes : 0)) & ~size_t{63};
  }
  size_t dataBytes() const { return data_bytes_; }
  // Bytes in each half of the data area (a multiple of 64).
  size_t halfBytes() const { return half_bytes_; }
  // Communicator rank `set_rank`'s data area.
  unsigned char* data(int set_rank) const {
    return static_cast<unsigned char*>(arena_->slot(comm_.arenaRank(set_rank)));
  }
  // Communicator rank `set_rank`'s data half `h` (0 or 1).
  unsigned char* half(int set_rank, int h) const {
    return data(set_rank) + static_cast<size_t>(h) * half_bytes_;
  }
  // Communicator rank `set_rank`'s line `parity` (0 or 1) of this communicator's group.
  // Valid only when hasLines().
  SmallLine* line(int set_rank, int parity) const {
    return groupLine(*arena_, comm_.arenaRank(set_rank), comm_.groupId(), parity);
  }
  void barrier() const { arena_->barrier(comm_.groupId(), comm_.arenaMembers()); }
  uint64_t barrierMax(uint64_t value) const {
    return arena_->barrierMax(comm_.groupId(), comm_.arenaMembers(), value);
  }

 private:
  Communicator& comm_;
  transport::ShmArena* arena_;
  size_t data_bytes_;
  size_t half_bytes_;
};

}  // namespace perseus::collectives::detail
