#include "transport/shm/shm_arena_impl.h"

#include <sched.h>

#include <algorithm>

#include "common/logging.h"
#include "common/status.h"

namespace perseus::transport::shm {
namespace {

using Clock = std::chrono::steady_clock;

// After the busy-poll, yield the core for this long before sleeping on the futex: on an
// oversubscribed host the member we wait for may need our core to arrive.
constexpr std::chrono::microseconds kYieldPhase{200};
constexpr std::chrono::microseconds kSleepSlice{1000};
constexpr std::chrono::microseconds kCheckPeerInterval{2000};

}  // namespace

ShmArenaImpl::ShmArenaImpl(std::shared_ptr<ShmSegmentSet> set,
                           std::shared_ptr<ShmDoorbell> doorbell, const Params& params)
    : set_(std::move(set)),
      doorbell_(std::move(doorbell)),
      spin_(std::max<int64_t>(0, params.spin_us)),
      timeout_(params.timeout_s),
      yield_when_idle_(doorbell_->oversubscribed()),
      epochs_(kMaxGroups, 0) {
  for (int g = 0; g < kMaxGroups; ++g) {
    epochs_[g] = set_->epoch(set_->localRank(), g)->load(std::memory_order_relaxed);
  }
}

void* ShmArenaImpl::slot(int local_rank) {
  if (local_rank < 0 || local_rank >= localSize()) {
    throw InvalidArgumentError(PERSEUS_STR(
        "ShmArena::slot(" << local_rank << "): this host has local ranks 0.." << localSize() - 1));
  }
  return set_->slot(local_rank);
}

void ShmArenaImpl::checkPeer(int local_rank, const std::string& waiting_for) const {
  std::string why;
  if (local_rank == localRank() || local_rank < 0 || local_rank >= localSize() ||
      !set_->peerGone(local_rank, &why)) {
    return;
  }
  set_->throwPeerLost(local_rank, why, waiting_for);
}

ShmArena::SharedArea ShmArenaImpl::sharedArea(int local_rank) {
  slot(local_rank);  // validates local_rank
  SharedArea a;
  a.words = set_->sharedWords(local_rank);
  a.num_words = kSharedWords;
  a.bytes = set_->sharedBytes(local_rank);
  a.num_bytes = kSharedBytes;
  return a;
}

void ShmArenaImpl::checkGroup(int group_id) const {
  if (group_id < 0 || group_id >= kMaxGroups) {
    throw InvalidArgumentError(
        PERSEUS_STR("ShmArena: group " << group_id << " is not in 0.." << kMaxGroups - 1));
  }
}

void ShmArenaImpl::validateMembers(int group_id, const std::vector<int>& members) const {
  const bool group_ok = group_id >= 0 && group_id < kMaxGroups;
  const bool sorted = std::adjacent_find(members.begin(), members.end(),
                                         [](int a, int b) { return a >= b; }) == members.end();
  const bool in_range = !members.empty() && members.front() >= 0 && members.back() < localSize();
  const bool has_me = std::binary_search(members.begin(), members.end(), localRank());
  if (!group_ok || !sorted || !in_range || !has_me) {
    throw InvalidArgumentError(PERSEUS_STR("ShmArena::barrier on local rank "
                                           << localRank() << ": group " << group_id
                                           << " must be in 0.." << kMaxGroups - 1 << " and members "
                                           << "must be sorted, unique local ranks in 0.."
                                           << localSize() - 1 << " that include this rank"));
  }
}

void ShmArenaImpl::checkAborted() const {
  if (!aborted_.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(abort_mutex_);
  throw ShutDownError(PERSEUS_STR("rank " << globalRanks()[localRank()]
                                          << ": shared-memory arena aborted: " << abort_reason_));
}

int ShmArenaImpl::firstMissing(int group_id, const std::vector<int>& members,
                               uint64_t target) const {
  for (int m : members) {
    if (set_->epoch(m, group_id)->load(std::memory_order_seq_cst) < target) return m;
  }
  return -1;
}

void ShmArenaImpl::barrier(int group_id, const std::vector<int>& members) {
  arrive(group_id, members, nullptr);
}

uint64_t ShmArenaImpl::barrierMax(int group_id, const std::vector<int>& members, uint64_t value) {
  const uint64_t target = arrive(group_id, members, &value);
  uint64_t largest = value;
  for (int m : members) {
    // Stored before the member's counter, which arrive() read with seq_cst.
    largest =
        std::max(largest, set_->carried(m, group_id, target)->load(std::memory_order_relaxed));
  }
  return largest;
}

uint64_t ShmArenaImpl::barriers(int group_id) const {
  checkGroup(group_id);
  return epochs_[static_cast<size_t>(group_id)];
}

void ShmArenaImpl::continueBarriersFrom(int group_id, uint64_t count) {
  checkGroup(group_id);
  uint64_t& mine = epochs_[static_cast<size_t>(group_id)];
  if (count < mine) {
    throw InvalidArgumentError(PERSEUS_STR("ShmArena::continueBarriersFrom: group "
                                           << group_id << " already passed " << mine
                                           << " barriers, not " << count));
  }
  mine = count;
}

uint64_t ShmArenaImpl::arrive(int group_id, const std::vector<int>& members,
                              const uint64_t* carried) {
  validateMembers(group_id, members);
  checkAborted();
  const uint64_t target = ++epochs_[group_id];
  if (carried)
    set_->carried(localRank(), group_id, target)->store(*carried, std::memory_order_relaxed);
  set_->epoch(localRank(), group_id)->store(target, std::memory_order_seq_cst);  // see notify()
  for (int m : members) {
    if (m != localRank()) set_->notify(m);
  }

  int missing = firstMissing(group_id, members, target);
  if (missing < 0) return target;
  const Clock::time_point start = Clock::now();
  Clock::time_point last_check = start;
  for (uint32_t i = 1;; ++i) {
    missing = firstMissing(group_id, members, target);
    if (missing < 0) return target;
    if (!yield_when_idle_ && (i & 63u) != 0) continue;
    checkAborted();
    const Clock::time_point now = Clock::now();
    const auto waited = now - start;
    if (waited < spin_ && !yield_when_idle_) continue;
    if (now - last_check >= kCheckPeerInterval) {
      last_check = now;
      for (int m : members) {
        std::string why;
        if (m == localRank() || !set_->peerGone(m, &why)) continue;
        // It may have arrived just before it went away.
        if (set_->epoch(m, group_id)->load(std::memory_order_seq_cst) >= target) continue;
        set_->throwPeerLost(m, why,
                            PERSEUS_STR("waiting for it in shared-memory barrier "
                                        << target << " of group " << group_id));
      }
      const std::chrono::duration<double> waited_s = waited;
      if (waited_s >= timeout_) {
        throw TimeoutError(PERSEUS_STR(
            "rank " << globalRanks()[localRank()] << ": waited " << waited_s.count()
                    << " s (PERSEUS_TIMEOUT) in shared-memory barrier " << target << " of group "
                    << group_id << " for rank " << globalRanks()[missing] << " (local rank "
                    << missing << "), which did not arrive; it may be stuck or running a "
                    << "different collective"));
      }
    }
    // Oversubscribed, a busy-poll that keeps the core delays the member we wait for by a
    // time slice: yield from the start.
    if (waited < spin_ + kYieldPhase && (yield_when_idle_ || waited >= spin_)) {
      sched_yield();
      continue;
    }
    const uint32_t ticket = doorbell_->arm();
    if (firstMissing(group_id, members, target) < 0 || aborted_.load()) {
      doorbell_->disarm();
      continue;
    }
    doorbell_->wait(ticket, kSleepSlice);
  }
}

void ShmArenaImpl::abort(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(abort_mutex_);
    if (aborted_.load()) return;
    abort_reason_ = reason;
    aborted_.store(true, std::memory_order_seq_cst);  // seq_cst: see ShmSegmentSet::notify()
  }
  PERSEUS_LOG(INFO, kTransport) << "shared-memory arena aborted: " << reason;
  doorbell_->ring();
}

}  // namespace perseus::transport::shm
