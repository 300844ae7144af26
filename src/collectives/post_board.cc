#include "collectives/post_board.h"

#include <utility>

namespace perseus::collectives {

PostBoard::PostBoard(std::atomic<uint64_t>* states, size_t num_states,
                     std::vector<std::array<unsigned char*, 2>> pools, size_t pool_bytes,
                     std::vector<std::atomic<uint64_t>*> listening,
                     std::vector<std::atomic<uint64_t>*> posts, int rank)
    : states_(states),
      num_states_(num_states),
      pools_(std::move(pools)),
      pool_bytes_(pool_bytes),
      listening_(std::move(listening)),
      posts_(std::move(posts)),
      rank_(rank) {}

namespace {

constexpr size_t kListeningWord = 0;
constexpr size_t kPostsWord = PostBoard::kWordsPerLine;

}  // namespace

std::optional<PostBoard> PostBoard::fromArena(transport::ShmArena& arena, int rank, int size) {
  if (size < 2 || arena.localSize() != size) return std::nullopt;
  const std::vector<int>& globals = arena.globalRanks();
  std::vector<std::array<unsigned char*, 2>> pools(static_cast<size_t>(size));
  std::vector<std::atomic<uint64_t>*> listening(static_cast<size_t>(size)),
      posts(static_cast<size_t>(size));
  size_t pool_bytes = 0;
  for (int lr = 0; lr < size; ++lr) {
    const transport::ShmArena::SharedArea a = arena.sharedArea(lr);
    if (a.words == nullptr || slotsIn(a.num_words) == 0 || a.bytes == nullptr ||
        globals[static_cast<size_t>(lr)] < 0 || globals[static_cast<size_t>(lr)] >= size) {
      return std::nullopt;
    }
    const auto r = static_cast<size_t>(globals[static_cast<size_t>(lr)]);
    pool_bytes = a.num_bytes / 2;
    pools[r] = {a.bytes, a.bytes + pool_bytes};
    listening[r] = a.words + kListeningWord;
    posts[r] = a.words + kPostsWord;
  }
  const transport::ShmArena::SharedArea shared = arena.sharedArea(0);
  return PostBoard(shared.words + kFirstState, slotsIn(shared.num_words), std::move(pools),
                   pool_bytes, std::move(listening), std::move(posts), rank);
}

bool PostBoard::publish(size_t slot) {
  std::atomic<uint64_t>& word = states_[slot];
  uint64_t seen = word.load(std::memory_order_relaxed);
  do {
    if (seen & kRevokedBit) return false;
    // Release: a rank that reads the count (acquire) sees the payload written before it. The
    // chain of read-modify-writes carries every poster's release to that reader.
  } while (!word.compare_exchange_weak(seen, seen + 1, std::memory_order_seq_cst,
                                       std::memory_order_relaxed));
  std::atomic<uint64_t>& count = *posts_[static_cast<size_t>(rank_)];
  count.store(count.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  return true;
}

uint64_t PostBoard::othersPosts() const {
  uint64_t sum = 0;
  for (size_t r = 0; r < posts_.size(); ++r) {
    if (static_cast<int>(r) != rank_) sum += posts_[r]->load(std::memory_order_relaxed);
  }
  return sum;
}

PostBoard::State PostBoard::classify(uint64_t word, uint64_t gen) const {
  if (gen > 0 && (word & ~kRevokedBit) >= gen * static_cast<uint64_t>(size())) {
    return State::kComplete;
  }
  return (word & kRevokedBit) ? State::kRevoked : State::kWaiting;
}

PostBoard::State PostBoard::state(size_t slot, uint64_t gen) const {
  return classify(states_[slot].load(std::memory_order_seq_cst), gen);
}

PostBoard::State PostBoard::revoke(size_t slot, uint64_t gen) {
  const uint64_t before = states_[slot].fetch_or(kRevokedBit, std::memory_order_seq_cst);
  return classify(before | kRevokedBit, gen);
}

}  // namespace perseus::collectives
