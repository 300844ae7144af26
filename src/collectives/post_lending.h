// Posts by address (Note [Posts by address] in engine/posted/posted_collectives.h): a rank
// posts a broadcast's or an allgather's contribution as the address of its own buffer, and the
// readers copy it straight out of the rank's memory (transport/shm/cross_memory.h), one copy
// where posting through the pool takes two.
//
// Beside the post board (post_board.h), in the same shared area: per rank, a line with its
// process id, the address of a byte its peers read to find out whether they may read its
// memory at all, and what it found out itself (unknown, yes, no); per rank and slot, in the
// rank's own area, the last generation it has read: a rank stores g once it has copied every
// post of generation g it reads, so g has been read by everyone once every rank's mark reaches
// it, and a lender that waits too long can name the ranks below it. A post's descriptor (the
// address, or 0 for a post in the pool) lies in the rank's pool of the generation's parity, at
// the slot's descriptor offset, written before the post is counted (PostBoard::publish()).
//
// Thread contract: probe() and everyoneReads() under the lane's lock; the rest on any thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "transport/shm/shm_arena.h"

namespace perseus::collectives {

class PostLending {
 public:
  // `lines[r]`: set rank r's words (its pid, its probe byte's address, what it found);
  // `reads[r]`: set rank r's read marks, one per slot of the board.
  PostLending(std::vector<std::atomic<uint64_t>*> lines, std::vector<std::atomic<uint64_t>*> reads,
              int rank);
  // As PostBoard::fromArena(), which lays out the same area; publishes this rank's pid and
  // probe byte.
  static std::optional<PostLending> fromArena(transport::ShmArena& arena, int rank, int size);

  // Once every rank published its line: reads a byte of every peer's memory (unless `refuse`:
  // PERSEUS_SHM_SINGLE_COPY=0) and publishes whether all could be read. Idempotent.
  void probe(bool refuse);
  // Whether every rank found that it can read every other's memory. Once true, it stays.
  bool everyoneReads();

  // Copies `bytes` from `address` in set rank `r`'s memory to `to`: 0 or the errno.
  int read(int r, uint64_t address, void* to, size_t bytes) const;

  // This rank copied every post of generation `gen` of `slot` it reads: true when everyone
  // has read it now (the caller rings those who listen; of ranks that mark at once, at least
  // the last sees all the marks, and more than one may ring).
  bool readAll(size_t slot, uint64_t gen);
  // Whether every rank has read generation `gen` of `slot`.
  bool everyoneRead(size_t slot, uint64_t gen) const;
  // The set ranks that have not read generation `gen` of `slot` yet, in rank order.
  std::vector<int> unread(size_t slot, uint64_t gen) const;

  // A post's descriptor, in the poster's pool: its buffer's address, or 0 (posted in the pool).
  static void describe(unsigned char* at, const void* address);
  static uint64_t addressIn(const unsigned char* at);

 private:
  enum Word : size_t { kPid = 0, kProbeAddress = 1, kReads = 2 };
  enum Reads : uint64_t { kUnknown = 0, kYes = 1, kNo = 2 };

  std::vector<std::atomic<uint64_t>*> lines_;
  std::vector<std::atomic<uint64_t>*> reads_;
  int rank_;
  bool everyone_ = false;  // cached once true
};

}  // namespace perseus::collectives
