// The posts whose buffer the peers read by address (Note [Posts by address] in
// posted_collectives.h): settled in two stages, the read, then the completion once every rank
// has read the generation.
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/logging.h"
#include "engine/posted/posted_collectives.h"

namespace perseus::engine {
namespace {

using Clock = std::chrono::steady_clock;
using collectives::PostBoard;

}  // namespace

bool PostedCollectives::claimRead(size_t index, uint64_t gen) {
  uint64_t expected = 2 * gen - 2;
  return claimed_[index].compare_exchange_strong(expected, 2 * gen - 1, std::memory_order_acq_rel);
}

bool PostedCollectives::claimLentDone(size_t index, uint64_t gen) {
  uint64_t expected = 2 * gen - 1;
  return claimed_[index].compare_exchange_strong(expected, 2 * gen, std::memory_order_acq_rel);
}

std::optional<PostedCollectives::Claim> PostedCollectives::claimLentLocked(
    size_t index, const Clock::time_point* now) {
  PostSlot& s = slots_[index];
  Claim c;
  c.slot = &s;
  c.input = s.input;
  c.output = s.output;
  c.gen = s.gen;
  c.lent = true;
  if (claimRead(index, s.gen)) {
    // Read outside the lock; the post stays pending (in flight) until everyone has read it.
    c.read = true;
    c.handle = s.pending;
    return c;
  }
  if (!lending_->everyoneRead(index, s.gen)) {
    std::optional<Failure> failed;
    if (now != nullptr) failed = unreadLocked(s, *now);
    if (!failed) return std::nullopt;
    c.failure = std::move(*failed);
  }
  if (!claimLentDone(index, s.gen)) return std::nullopt;
  c.handle = std::move(s.pending);
  dropPendingLocked(s);
  if (c.failure.code != StatusCode::kOk) retireLocked(index);
  return c;
}

void PostedCollectives::settleLent(Claim c) {
  const size_t index = c.slot->index;
  if (!c.read) {
    if (c.failure.code != StatusCode::kOk) {
      PERSEUS_LOG(ERROR, kEngine) << c.failure.message;
    }
    c.handle->complete(c.failure.code, c.failure.message);
    return;
  }
  // Unless everyone read already, a later look completes it.
  completeReadLent(*c.handle, index, c.gen,
                   finish(*c.slot, c.gen, c.input, c.output, c.handle.get()));
}

bool PostedCollectives::completeReadLent(Handle& handle, size_t index, uint64_t gen, int err) {
  if (err == 0 && !lending_->everyoneRead(index, gen)) return false;
  if (!claimLentDone(index, gen)) return false;
  const Failure f = err == 0 ? Failure{} : readFailure(slots_[index], err);
  handle.complete(f.code, f.message);
  std::lock_guard<std::mutex> lock(mu_);
  dropCompletedLocked(slots_[index]);
  return true;
}

bool PostedCollectives::progressLent(Handle& handle, size_t index, uint64_t gen) {
  const PostSlot& s = slots_[index];
  int err = 0;
  if (claimRead(index, gen)) err = finish(s, gen, s.input, s.output, &handle);
  // The sweep gives up on readers that were lost or too slow (claimLentLocked()).
  return !completeReadLent(handle, index, gen, err);
}

std::optional<PostedCollectives::Failure> PostedCollectives::awaitReaders(const PostSlot& s,
                                                                          uint64_t gen) const {
  // The peers read as soon as they see the generation complete (a watching caller at once, the
  // engine thread at its next sweep or ring), so this is short; the core is yielded now and
  // then for a peer's thread that shares it.
  Clock::time_point until{}, check{};
  for (uint32_t looks = 1; !lending_->everyoneRead(s.index, gen); ++looks) {
    if ((looks & 255u) != 0) continue;
    const auto now = Clock::now();
    if (until == Clock::time_point{}) {
      until = now + read_timeout_;
      check = now + patience_;
    }
    if (now >= check || now >= until) {
      check = now + patience_;
      if (std::optional<Failure> f = unreadFailure(s, gen, now >= until)) return f;
    }
    sched_yield();
  }
  return std::nullopt;
}

std::optional<PostedCollectives::Failure> PostedCollectives::unreadLocked(PostSlot& s,
                                                                          Clock::time_point now) {
  const std::vector<int> unread = lending_->unread(s.index, s.gen);
  // This rank's own read is under way on another thread: it ends without waiting.
  if (std::find(unread.begin(), unread.end(), board_->rank()) != unread.end()) return std::nullopt;
  if (s.unread_since == Clock::time_point{} || resumed_) s.unread_since = now;
  if (s.unread_check == Clock::time_point{}) s.unread_check = now + patience_;
  const bool timed_out = now - s.unread_since >= read_timeout_;
  if (!timed_out && now < s.unread_check) return std::nullopt;
  s.unread_check = now + patience_;
  return unreadFailure(s, s.gen, timed_out);
}

std::optional<PostedCollectives::Failure> PostedCollectives::unreadFailure(const PostSlot& s,
                                                                           uint64_t gen,
                                                                           bool timed_out) const {
  const std::vector<int> unread = lending_->unread(s.index, gen);
  if (unread.empty()) return std::nullopt;
  if (std::optional<Failure> lost =
          lostRank(s, unread, "waiting for it to read this rank's buffer (posted by address)")) {
    return lost;
  }
  if (!timed_out) return std::nullopt;
  std::ostringstream who;
  for (size_t i = 0; i < unread.size(); ++i) who << (i == 0 ? "" : ", ") << unread[i];
  const bool one = unread.size() == 1;
  const std::chrono::duration<double> waited = read_timeout_;
  return Failure{
      StatusCode::kTimeout,
      PERSEUS_STR(opTypeName(s.kind)
                  << " '" << *s.name << "' failed: rank " << board_->rank() << " waited "
                  << waited.count() << " s (PERSEUS_TIMEOUT) for rank" << (one ? " " : "s ")
                  << who.str() << " to read its buffer (posted by address), which "
                  << (one ? "it" : "they") << " did not; " << (one ? "it" : "they")
                  << " may be stuck or have left the job"),
      -1};
}

std::optional<PostedCollectives::Failure> PostedCollectives::lostRank(
    const PostSlot& s, const std::vector<int>& ranks, const std::string& waiting_for) const {
  if (arena_ == nullptr) return std::nullopt;
  const std::vector<int>& globals = arena_->globalRanks();
  try {
    for (int r : ranks) {
      // Set rank r of the global set is global rank r; the arena knows local ranks.
      const auto at = std::find(globals.begin(), globals.end(), r);
      if (at != globals.end())
        arena_->checkPeer(static_cast<int>(at - globals.begin()), waiting_for);
    }
  } catch (const PeerLostError& e) {
    return Failure{StatusCode::kPeerLost,
                   PERSEUS_STR(opTypeName(s.kind) << " '" << *s.name << "' failed: " << e.what()),
                   e.rank()};
  }
  return std::nullopt;
}

void PostedCollectives::raise(const Failure& f) {
  if (f.code == StatusCode::kPeerLost) throw PeerLostError(f.rank, f.message);
  if (f.code == StatusCode::kTimeout) throw TimeoutError(f.message);
  throw InternalError(f.message);
}

void PostedCollectives::retireLocked(size_t index) {
  board_->revoke(index, 0);
  slots_[index].dead = true;
}

bool PostedCollectives::settleable(size_t index) const {
  const PostSlot& s = slots_[index];
  const PostBoard::State st = board_->state(index, s.gen);
  if (st == PostBoard::State::kWaiting) return false;
  if (st == PostBoard::State::kRevoked || !s.lent) return true;
  // Read already and waiting for the peers' reads: the last reader rings.
  return claimed_[index].load(std::memory_order_acquire) != 2 * s.gen - 1 ||
         lending_->everyoneRead(index, s.gen);
}

PostedCollectives::Failure PostedCollectives::readFailure(const PostSlot& s, int err) const {
  // A poster whose process is gone (its memory with it) is a lost rank, not a broken read.
  std::vector<int> peers;
  for (int r = 0; r < board_->size(); ++r) {
    if (r != board_->rank()) peers.push_back(r);
  }
  // ESRCH: a poster's process is gone or still exiting, which the arena sees once it exited.
  const Clock::time_point until = Clock::now() + (err == ESRCH ? patience_ : Clock::duration{});
  for (;;) {
    if (std::optional<Failure> lost =
            lostRank(s, peers, "reading its buffer (posted by address)")) {
      return *lost;
    }
    if (Clock::now() >= until) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return Failure{
      StatusCode::kInternal,
      PERSEUS_STR("posted " << opTypeName(s.kind) << " '" << *s.name << "' on rank "
                            << board_->rank() << ": reading a peer's buffer by address failed ("
                            << std::strerror(err)
                            << "); PERSEUS_POSTED_BY_ADDRESS=0 posts through the pools"),
      -1};
}

}  // namespace perseus::engine
