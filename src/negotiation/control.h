// The per-cycle control message of one process set: a bit vector that every member
// contributes to and that one bitwise-AND allreduce combines (Note [Response cache]).
//
// Layout, in 64-bit words:
//   [ flags (OR) | set work (OR, 64 bits) | ready (AND, numBits) | invalid (OR, numBits) ]
// OR bits are stored inverted (a 0 means "some rank set it") so that AND computes OR.
// The size depends on the cache's bit count, which is identical on every rank, never on how
// many tensors are pending.
#pragma once

#include <cstdint>
#include <vector>

#include "collectives/communicator.h"

namespace perseus::engine {

enum class ControlFlag : int {
  kUncached = 0,         // some rank has requests for the coordinator
  kShutdown = 1,         // some rank is shutting down
  kJoined = 2,           // some rank has joined
  kInvalid = 3,          // some rank invalidated cache bits
  kNoPosts = 4,          // some rank cannot post allreduces (Note [Posted collectives])
  kStragglerWindow = 5,  // global set rank 0: close the straggler window (straggler_watch.h)
};

class ControlVector {
 public:
  explicit ControlVector(int num_bits = 0);
  void reset(int num_bits);

  void setFlag(ControlFlag f) { clearBit(0, static_cast<int>(f)); }
  bool anyFlag(ControlFlag f) const { return !testBit(0, static_cast<int>(f)); }
  // Work pending in the process set whose group id is `group` (0..63).
  void setSetWork(int group) { clearBit(1, group); }
  bool anySetWork(int group) const { return (setsWithWork() >> group) & 1; }
  // Every group some rank has work in, bit g for group id g.
  uint64_t setsWithWork() const { return ~words_[1]; }
  void setReady(int bit) { setBit(2, bit); }
  bool ready(int bit) const { return testBit(2, bit); }
  void setInvalid(int bit) { clearBit(2 + ready_words_, bit); }
  bool invalid(int bit) const { return !testBit(2 + ready_words_, bit); }

  int numBits() const { return num_bits_; }
  uint64_t* data() { return words_.data(); }
  size_t numWords() const { return words_.size(); }

 private:
  void setBit(size_t word0, int bit) { words_[word0 + bit / 64] |= uint64_t{1} << (bit % 64); }
  void clearBit(size_t word0, int bit) { words_[word0 + bit / 64] &= ~(uint64_t{1} << (bit % 64)); }
  bool testBit(size_t word0, int bit) const { return (words_[word0 + bit / 64] >> (bit % 64)) & 1; }

  int num_bits_ = 0;
  size_t ready_words_ = 0;
  std::vector<uint64_t> words_;
};

// words[i] = AND over the communicator's ranks of words[i]. Recursive doubling over
// point-to-point messages (after folding the ranks beyond a power of two), so that the bytes
// go through Transport and wake a peer that waits in waitIncoming().
void allreduceAnd(collectives::Communicator& comm, uint64_t* words, size_t count);

// The ranks of `comm` that passed `mine` = true, in order (one more allreduceAnd, one inverted
// bit per rank). Collective: every member calls it.
std::vector<int> ranksThatSaid(collectives::Communicator& comm, bool mine);

}  // namespace perseus::engine
