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

PostLending::PostLending(std::vector<std::atomic<uint64_t>*> lines,
                         std::vector<std::atomic<uint64_t>*> reads, int rank)
    : lines_(std::move(lines)), reads_(std::move(reads)), rank_(rank) {
  std::atomic<uint64_t>* mine = lines_[static_cast<size_t>(rank_)];
  mine[kPid].store(static_cast<uint64_t>(::getpid()), std::memory_order_relaxed);
  mine[kProbeAddress].store(reinterpret_cast<uintptr_t>(&kProbeByte), std::memory_order_release);
}

std::optional<PostLending> PostLending::fromArena(transport::ShmArena& arena, int rank, int size) {
  if (size < 2 || arena.localSize() != size) return std::nullopt;
  const std::vector<int>& globals = arena.globalRanks();
  // The board's slots are the shared area's (local rank 0's); each rank's marks follow the
  // slot states of its own area.
  const size_t slots = PostBoard::slotsIn(arena.sharedArea(0).num_words);
  std::vector<std::atomic<uint64_t>*> lines(static_cast<size_t>(size)),
      reads(static_cast<size_t>(size));
  for (int lr = 0; lr < size; ++lr) {
    const transport::ShmArena::SharedArea a = arena.sharedArea(lr);
    const int g = globals[static_cast<size_t>(lr)];
    if (a.words == nullptr || slots == 0 || PostBoard::slotsIn(a.num_words) < slots || g < 0 ||
        g >= size) {
      return std::nullopt;
    }
    lines[static_cast<size_t>(g)] = a.words + PostBoard::kLendingWord;
    reads[static_cast<size_t>(g)] =
        a.words + PostBoard::kFirstState + PostBoard::slotsIn(a.num_words);
  }
  return PostLending(std::move(lines), std::move(reads), rank);
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
  // Release: the owner that sees the mark may rewrite what this rank copied. seq_cst with the
  // loads below (Dekker): of two ranks that mark at once, one sees the other's mark.
  reads_[static_cast<size_t>(rank_)][slot].store(gen, std::memory_order_seq_cst);
  for (std::atomic<uint64_t>* marks : reads_) {
    if (marks[slot].load(std::memory_order_seq_cst) < gen) return false;
  }
  return true;
}

bool PostLending::everyoneRead(size_t slot, uint64_t gen) const {
  for (std::atomic<uint64_t>* marks : reads_) {
    if (marks[slot].load(std::memory_order_acquire) < gen) return false;
  }
  return true;
}

std::vector<int> PostLending::unread(size_t slot, uint64_t gen) const {
  std::vector<int> ranks;
  for (size_t r = 0; r < reads_.size(); ++r) {
    if (reads_[r][slot].load(std::memory_order_acquire) < gen) ranks.push_back(static_cast<int>(r));
  }
  return ranks;
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
