// The posts whose buffer the peers read by address (Note [Posts by address] in
// posted_collectives.h): settled in two stages, the read, then the completion once every rank
// has read the generation.
#include <sched.h>

#include <cstring>

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

std::optional<PostedCollectives::Claim> PostedCollectives::claimLentLocked(size_t index) {
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
  if (!lending_->everyoneRead(index, s.gen) || !claimLentDone(index, s.gen)) return std::nullopt;
  c.handle = std::move(s.pending);
  dropPendingLocked(s);
  return c;
}

void PostedCollectives::settleLent(Claim c) {
  const size_t index = c.slot->index;
  if (!c.read) {
    c.handle->complete(StatusCode::kOk, "");
    return;
  }
  const int err = finish(*c.slot, c.gen, c.input, c.output, c.handle.get());
  if (err == 0 && !lending_->everyoneRead(index, c.gen)) return;  // a later look completes it
  if (!claimLentDone(index, c.gen)) return;
  c.handle->complete(err == 0 ? StatusCode::kOk : StatusCode::kInternal,
                     err == 0 ? "" : readFailure(*c.slot, err));
  std::lock_guard<std::mutex> lock(mu_);
  dropCompletedLocked(slots_[index]);
}

bool PostedCollectives::progressLent(Handle& handle, size_t index, uint64_t gen) {
  const PostSlot& s = slots_[index];
  int err = 0;
  if (claimRead(index, gen)) err = finish(s, gen, s.input, s.output, &handle);
  if (err == 0 && !lending_->everyoneRead(index, gen)) return true;
  if (!claimLentDone(index, gen)) return true;  // another thread completes it
  handle.complete(err == 0 ? StatusCode::kOk : StatusCode::kInternal,
                  err == 0 ? "" : readFailure(s, err));
  std::lock_guard<std::mutex> lock(mu_);
  dropCompletedLocked(slots_[index]);
  return false;
}

bool PostedCollectives::awaitReaders(size_t index, uint64_t gen) const {
  // The peers read as soon as they see the generation complete (a watching caller at once, the
  // engine thread at its next sweep or ring), so this is short; the core is yielded now and
  // then for a peer's thread that shares it.
  Clock::time_point until{};
  for (uint32_t looks = 1; !lending_->everyoneRead(index, gen); ++looks) {
    if ((looks & 255u) != 0) continue;
    const auto now = Clock::now();
    if (until == Clock::time_point{}) until = now + read_timeout_;
    if (now >= until) return false;
    sched_yield();
  }
  return true;
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

std::string PostedCollectives::readFailure(const PostSlot& s, int err) const {
  return PERSEUS_STR("posted " << opTypeName(s.kind) << " '" << *s.name << "' on rank "
                               << board_->rank() << ": reading a peer's buffer by address failed ("
                               << std::strerror(err)
                               << "); PERSEUS_POSTED_BY_ADDRESS=0 posts through the pools");
}

}  // namespace perseus::engine
