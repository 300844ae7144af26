#include "negotiation/control.h"

namespace perseus::engine {

ControlVector::ControlVector(int num_bits) { reset(num_bits); }

void ControlVector::reset(int num_bits) {
  num_bits_ = num_bits;
  ready_words_ = (static_cast<size_t>(num_bits) + 63) / 64;
  words_.assign(2 + 2 * ready_words_, ~uint64_t{0});
  for (size_t i = 0; i < ready_words_; ++i) words_[2 + i] = 0;
}

void allreduceAnd(collectives::Communicator& comm, uint64_t* words, size_t count) {
  const int size = comm.size();
  const int rank = comm.rank();
  if (size == 1 || count == 0) return;
  const size_t bytes = count * sizeof(uint64_t);
  // A control vector is a few words: its partner's copy lives on the stack unless it is long.
  constexpr size_t kStackWords = 32;
  uint64_t stack_words[kStackWords];
  std::vector<uint64_t> heap_words(count > kStackWords ? count : 0);
  uint64_t* tmp = count > kStackWords ? heap_words.data() : stack_words;
  // Communicator::exchange in set ranks; an empty side is simply left out.
  auto send = [&](int peer, const void* data) { comm.exchange({{peer, data, bytes}}, {}); };
  auto recv = [&](int peer, void* data) { comm.exchange({}, {{peer, data, bytes}}); };
  auto absorb = [&] {
    for (size_t i = 0; i < count; ++i) words[i] &= tmp[i];
  };

  int pof2 = 1;
  while (pof2 * 2 <= size) pof2 *= 2;
  const int rem = size - pof2;

  // Fold: among the first 2*rem ranks, even ones hand their bits to the next odd one and sit
  // out the doubling rounds. Both directions move (the odd rank's bits are unused) because a
  // rank must send to a peer before it waits on it: the peer may be idle in waitIncoming() and
  // starts its cycle only when bytes arrive. A bare receive here left 3 ranks waiting for
  // the idle rank's 100 ms timeout.
  int vrank;
  if (rank < 2 * rem) {
    const int partner = rank % 2 == 0 ? rank + 1 : rank - 1;
    comm.exchange({{partner, words, bytes}}, {{partner, tmp, bytes}});
    if (rank % 2 == 0) {
      vrank = -1;
    } else {
      absorb();
      vrank = rank / 2;
    }
  } else {
    vrank = rank - rem;
  }
  if (vrank >= 0) {
    for (int mask = 1; mask < pof2; mask <<= 1) {
      int vpeer = vrank ^ mask;
      int peer = vpeer < rem ? vpeer * 2 + 1 : vpeer + rem;
      comm.exchange({{peer, words, bytes}}, {{peer, tmp, bytes}});
      absorb();
    }
  }
  if (rank < 2 * rem) {
    if (rank % 2 == 0) {
      recv(rank + 1, words);
    } else {
      send(rank - 1, words);
    }
  }
}

std::vector<int> ranksThatSaid(collectives::Communicator& comm, bool mine) {
  std::vector<uint64_t> words((static_cast<size_t>(comm.size()) + 63) / 64, ~uint64_t{0});
  if (mine) words[comm.rank() / 64] &= ~(uint64_t{1} << (comm.rank() % 64));
  allreduceAnd(comm, words.data(), words.size());
  std::vector<int> ranks;
  for (int r = 0; r < comm.size(); ++r) {
    if (!((words[r / 64] >> (r % 64)) & 1)) ranks.push_back(r);
  }
  return ranks;
}

}  // namespace perseus::engine
