// How posts are waited for (Note [Posted collectives] in posted_collectives.h): a blocking
// caller watching its own post, a caller watching a pending one for the spin (PostWatch), and
// the engine thread listening for the ring of a generation's last post while it sleeps.
#include <sched.h>

#include <chrono>

#include "engine/posted/posted_collectives.h"

namespace perseus::engine {

using collectives::PostBoard;

FastPath::PostResult PostedCollectives::watchCaller(const Call& c, const void* input, void* output,
                                                    size_t index, uint64_t gen,
                                                    std::unique_lock<std::mutex>& lock) {
  const PostSlot& s = slots_[index];
  if (!c.blocking || (s.kind != OpType::kAllreduce && s.kind != OpType::kBroadcast)) {
    return PostResult::kPosted;
  }
  return watchBlocking(input, output, index, gen, lock);
}

FastPath::PostResult PostedCollectives::watchBlocking(const void* input, void* output, size_t index,
                                                      uint64_t gen,
                                                      std::unique_lock<std::mutex>& lock) {
  // Finished as a settling thread finishes a claim, but with nothing pending to claim: the
  // post is this caller's alone while watched_ (or the lock) keeps other threads off the slot.
  PostBoard::State st = board_->state(index, gen);
  if (st == PostBoard::State::kComplete) ringPeers();  // the generation's last post
  watched_[index].store(true, std::memory_order_relaxed);
  lock.unlock();
  return watchMarked(st, input, output, index, gen, lock);
}

FastPath::PostResult PostedCollectives::watchMarked(PostBoard::State st, const void* input,
                                                    void* output, size_t index, uint64_t gen,
                                                    std::unique_lock<std::mutex>& lock) {
  const PostSlot& s = slots_[index];
  PostWatch watch(*this, spin_us_);
  while (st == PostBoard::State::kWaiting && watch.keepWatching()) st = board_->state(index, gen);
  if (st == PostBoard::State::kComplete) {
    const int err = finish(s, gen, input, output, nullptr);
    std::optional<Failure> failed;
    if (err != 0) {
      failed = readFailure(s, err);
    } else if (s.lent) {
      failed = awaitReaders(s, gen);
    }
    if (failed) {
      // Retired while still watched: no other call of the name posts in between.
      lock.lock();
      retireLocked(index);
      watched_[index].store(false, std::memory_order_release);
      lock.unlock();
      raise(*failed);
    }
    watched_[index].store(false, std::memory_order_release);
    return PostResult::kFinished;
  }
  // Not complete within the spin, or revoked: from here it is pending like any post, with a
  // handle the caller waits on, which the engine thread can finish or send to negotiation.
  lock.lock();
  watched_[index].store(false, std::memory_order_relaxed);
  return closed_ ? PostResult::kClosed : PostResult::kPosted;
}

bool PostWatch::keepWatching() {
  ++looks_;
  if (looks_ == 64) {
    until_ = std::chrono::steady_clock::now() + spin_;
    others_ = posted_.othersPosts();
  } else if (looks_ > 64 && (looks_ & 255u) == 0) {
    const auto now = std::chrono::steady_clock::now();
    const uint64_t seen = posted_.othersPosts();
    if (seen != others_) {
      others_ = seen;
      until_ = now + spin_;
    } else if (now >= until_) {
      return false;
    }
    sched_yield();
  }
  return true;
}

void PostedCollectives::ringPeers() const {
  // Set rank r of the global set is global rank r.
  for (int r = 0; r < size_; ++r) {
    if (r != board_->rank() && board_->listening(r)) transport_->ring(r);
  }
}

bool PostedCollectives::listen() {
  if (!enabled()) return false;
  board_->setListening(true);
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t index : pending_slots_) {
    if (settleable(index)) {
      board_->setListening(false);
      return false;
    }
  }
  return true;
}

FastPath::IdleHint PostedCollectives::idleHint() {
  if (!enabled()) return {kUntilWoken, false};
  if (!hasPending()) return {kIdleSleep, false};
  IdleHint hint{kPendingSleep, false};
  // A post that completes one after listen() read the slots rings this rank: the driver's wait
  // hears it also when it came first (rings since the last wait are not lost).
  if (listeningWanted() && watchers_.load() == 0) {
    listening_ = listen();
    hint.listening = listening_;
    if (!listening_) hint.sleep = std::chrono::microseconds(0);  // one can be settled now
  }
  return hint;
}

void PostedCollectives::awake() {
  if (!listening_) return;
  board_->setListening(false);
  listening_ = false;
}

bool PostedCollectives::watch(Handle& handle, int64_t spin_us) {
  // Usually the other ranks posted already: settled at the first look, with no watch.
  bool pending = progress(handle);
  if (!pending || handle.done()) return false;
  // A post completes as soon as the last rank posts: watch it for the spin (PostWatch). The
  // engine thread does not listen for posts meanwhile.
  watchers_.fetch_add(1);
  PostWatch w(*this, spin_us);
  while (!handle.done() && (pending = progress(handle)) && w.keepWatching()) {
  }
  watchers_.fetch_sub(1);
  if (!pending || handle.done()) return false;
  wantListening();
  return true;
}

bool PostedCollectives::listenFor(Handle& handle) {
  PostIds::Posted p;
  if (handle.done() || !hasPending() || !ids_.find(handle.id(), &p)) return false;
  wantListening();
  return true;
}

}  // namespace perseus::engine
