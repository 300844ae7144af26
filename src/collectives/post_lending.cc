#include "collectives/post_lending.h"

#include <unistd.h>

#include <cstring>
#include <utility>

#include "collectives/post_board.h"
#include "transport/shm/cross_memory.h"

namespace perseus::collectives {
namespace {

// What the peers read to find out whether this process's memory can be read.
const unsigned char kProbeByte = 0x5a;

}  // namespace

PostLending::PostLending(std::vector<std::atomic<uint64_t>*> lines, std::atomic<uint64_t>* reads,
                         int rank)
    : lines_(std::move(lines)), reads_(reads), rank_(rank) {
  std::atomic<uint64_t>* mine = lines_[static_cast<size_t>(rank_)];
  mine[kPid].store(static_cast<uint64_t>(::getpid()), std::memory_order_relaxed);
  mine[kProbeAddress].store(reinterpret_cast<uintptr_t>(&kProbeByte), std::memory_order_release);
}

std::optional<PostLending> PostLending::fromArena(transport::ShmArena& arena, int rank, int size) {
  if (size < 2 || arena.localSize() != size) return std::nullopt;
  const std::vector<int>& globals = arena.globalRanks();
  std::vector<std::atomic<uint64_t>*> lines(static_cast<size_t>(size));
  for (int lr = 0; lr < size; ++lr) {
    const transport::ShmArena::SharedArea a = arena.sharedArea(lr);
    const int g = globals[static_cast<size_t>(lr)];
    if (a.words == nullptr || PostBoard::slotsIn(a.num_words) == 0 || g < 0 || g >= size) {
      return std::nullopt;
    }
    lines[static_cast<size_t>(g)] = a.words + PostBoard::kLendingWord;
  }
  const transport::ShmArena::SharedArea shared = arena.sharedArea(0);
  const size_t slots = PostBoard::slotsIn(shared.num_words);
  return PostLending(std::move(lines), shared.words + PostBoard::kFirstState + slots, rank);
}

void PostLending::probe(bool refuse) {
  std::atomic<uint64_t>& found = lines_[static_cast<size_t>(rank_)][kReads];
  if (found.load(std::memory_order_relaxed) != kUnknown) return;
  bool ok = !refuse;
  for (size_t q = 0; ok && q < lines_.size(); ++q) {
    if (static_cast<int>(q) == rank_) continue;
    const uint64_t at = lines_[q][kProbeAddress].load(std::memory_order_acquire);
    unsigned char byte = 0;
    if (at == 0) return;  // not published yet: ask again later
    ok = read(static_cast<int>(q), at, &byte, 1) == 0 && byte == kProbeByte;
  }
  found.store(ok ? kYes : kNo, std::memory_order_release);
}

bool PostLending::everyoneReads() {
  if (everyone_) return true;
  for (std::atomic<uint64_t>* line : lines_) {
    if (line[kReads].load(std::memory_order_acquire) != kYes) return false;
  }
  everyone_ = true;
  return true;
}

int PostLending::read(int r, uint64_t address, void* to, size_t bytes) const {
  const auto pid =
      static_cast<pid_t>(lines_[static_cast<size_t>(r)][kPid].load(std::memory_order_relaxed));
  return transport::shm::readPeerMemory(pid, reinterpret_cast<const void*>(address), to, bytes);
}

bool PostLending::readAll(size_t slot, uint64_t gen) {
  // Release: the owner that sees the count may rewrite what this rank copied.
  const uint64_t now = reads_[slot].fetch_add(1, std::memory_order_acq_rel) + 1;
  return now == gen * lines_.size();
}

bool PostLending::everyoneRead(size_t slot, uint64_t gen) const {
  return reads_[slot].load(std::memory_order_acquire) >= gen * lines_.size();
}

void PostLending::describe(unsigned char* at, const void* address) {
  const uint64_t a = reinterpret_cast<uintptr_t>(address);
  std::memcpy(at, &a, sizeof a);
}

uint64_t PostLending::addressIn(const unsigned char* at) {
  uint64_t a = 0;
  std::memcpy(&a, at, sizeof a);
  return a;
}

}  // namespace perseus::collectives
