// The shared-memory protocol of posted collectives (Note [Posted collectives] in
// engine/posted/posted_collectives.h): each rank posts its contribution to a generation of a slot
// one-sidedly, and any rank that sees every contribution of a generation reduces them itself.
//
// One 64-bit state word per slot, shared by the set's ranks, counts the posts of all
// generations so far (generation g is complete once it reaches g * size) and has a revoked bit.
// Posting is a compare-and-swap that never counts once the bit is set, so revoking freezes
// the count: every rank then agrees on which generations completed (those whose count was
// reached before the revocation) and sends the others the negotiated way.
//
// Payloads live in each rank's own pool, one per parity of the generation. Rank r writes
// generation g + 1 into the buffer of generation g - 1 only after its generation g completed,
// which needs every rank's post of g, which each rank made only after its own g - 1 completed,
// i.e. after it read every g - 1 payload. So no reader ever sees a buffer being rewritten.
//
// A rank whose engine thread sleeps while posts are pending (and no caller watches them) sets
// its listening flag; the rank whose post completes a generation rings the ranks that listen
// (Transport::ring(), the transport's doorbell).
//
// Its memory is the arena's shared area (ShmArena::sharedArea()), laid out by fromArena():
// per rank, the listening flag and the post count on cache lines of their own (a peer reads
// the flag on every post that completes a generation, the owner writes the count on every
// post), a line for posts by address (post_lending.h), then the slot states (local rank 0's are
// the shared ones) and as many read marks (each rank's own, post_lending.h); the area's bytes
// are the rank's two payload pools, one per parity of a post's generation.
//
// Thread contract: any thread; callers serialise posts of one slot (one name is in flight
// once per rank).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "transport/shm/shm_arena.h"

namespace perseus::collectives {

class PostBoard {
 public:
  // Per set rank r: `pools[r]`, its two pools of `pool_bytes` each, as mapped in this process;
  // `listening[r]`, its listening flag, and `posts[r]`, its post count (on separate cache lines:
  // the owner writes the count on every post, others read the flag on every completing post).
  PostBoard(std::atomic<uint64_t>* states, size_t num_states,
            std::vector<std::array<unsigned char*, 2>> pools, size_t pool_bytes,
            std::vector<std::atomic<uint64_t>*> listening,
            std::vector<std::atomic<uint64_t>*> posts, int rank);
  // The board of the job's `size` ranks in `arena`'s shared area, as global rank `rank` (set
  // rank r is the local rank whose global rank is r); nullopt unless the arena holds every rank
  // of the job and has a shared area.
  static std::optional<PostBoard> fromArena(transport::ShmArena& arena, int rank, int size);

  // The shared area's words (fromArena()): per rank, three lines (the listening flag, the post
  // count, post_lending.h's line); then the slot states, then one read mark per slot.
  static constexpr size_t kWordsPerLine = 64 / sizeof(uint64_t);
  static constexpr size_t kLendingWord = 2 * kWordsPerLine;
  static constexpr size_t kFirstState = 3 * kWordsPerLine;
  static size_t slotsIn(size_t num_words) {
    return num_words > kFirstState ? (num_words - kFirstState) / 2 : 0;
  }

  int size() const { return static_cast<int>(pools_.size()); }
  int rank() const { return rank_; }
  size_t numSlots() const { return num_states_; }
  size_t poolBytes() const { return pool_bytes_; }

  // Where set rank `r` posts generation `gen` (>= 1) of a slot whose payload starts at `offset`.
  unsigned char* payload(int r, uint64_t gen, size_t offset) const {
    return pools_[static_cast<size_t>(r)][gen & 1] + offset;
  }
  // Counts this rank's post of the slot's next generation (its payload written before).
  // False when the slot is revoked: the post does not count.
  bool publish(size_t slot);

  enum class State { kWaiting, kComplete, kRevoked };
  State state(size_t slot, uint64_t gen) const;
  // Sets the revoked bit; returns generation `gen`'s state as the revocation froze it
  // (kComplete or kRevoked). gen 0 asks about nothing (returns kRevoked).
  State revoke(size_t slot, uint64_t gen);

  // seq_cst on both sides (Dekker): a listener sets its flag, then reads the states; a poster
  // counts its post, then reads the flags.
  void setListening(bool on) {
    listening_[static_cast<size_t>(rank_)]->store(on ? 1 : 0, std::memory_order_seq_cst);
  }
  bool listening(int r) const {
    return listening_[static_cast<size_t>(r)]->load(std::memory_order_seq_cst) != 0;
  }
  // The posts the other ranks made so far: a waiter keeps watching while this moves.
  uint64_t othersPosts() const;

 private:
  static constexpr uint64_t kRevokedBit = uint64_t{1} << 63;
  State classify(uint64_t word, uint64_t gen) const;

  std::atomic<uint64_t>* states_;
  size_t num_states_;
  std::vector<std::array<unsigned char*, 2>> pools_;
  size_t pool_bytes_;
  std::vector<std::atomic<uint64_t>*> listening_;
  std::vector<std::atomic<uint64_t>*> posts_;
  int rank_;
};

}  // namespace perseus::collectives
