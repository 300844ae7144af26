#include "engine/posted/posted_collectives.h"

#include <algorithm>
#include <cstring>

#include "collectives/from_posts.h"
#include "common/logging.h"
#include "common/reduce_threads.h"
#include "kernels/reduce.h"

namespace perseus::engine {
namespace {

using Clock = std::chrono::steady_clock;
using collectives::PostBoard;

// A post's submission, from its handle's stamp.
Clock::time_point submittedAt(const Handle& h) {
  return Clock::time_point(std::chrono::nanoseconds(h.submittedNs()));
}

// The job's post board, when posting is on and the arena holds every rank.
std::optional<PostBoard> openBoard(transport::ShmArena* arena, transport::Transport* transport,
                                   const Params& params) {
  if (!params.posted_allreduce || arena == nullptr || transport == nullptr) return std::nullopt;
  return PostBoard::fromArena(*arena, transport->rank(), transport->size());
}

// What posts by address need (Note [Posts by address]), when they are on.
std::optional<collectives::PostLending> openLending(transport::ShmArena* arena,
                                                    transport::Transport* transport,
                                                    const Params& params) {
  if (!params.posted_allreduce || params.posted_by_address <= 0 || arena == nullptr ||
      transport == nullptr) {
    return std::nullopt;
  }
  return collectives::PostLending::fromArena(*arena, transport->rank(), transport->size());
}

// Note [By-address cap on many cores]: a post by address is read by one thread per reader,
// where the negotiated single-copy read splits among the rank's reduce threads
// (single_copy::readThreads). With one thread per rank the cap is PERSEUS_POSTED_BY_ADDRESS
// (4 MiB measured on 2 vCPUs); with more, the post's saved negotiation stops paying before
// that: on 16 cores at 2 ranks a 1 MiB broadcast by address took 90-108 us against 130 us
// negotiated, a 4 MiB one 556-762 us against 288 us.
constexpr size_t kThreadedByAddressMax = size_t{1} << 20;

size_t byAddressCap(const transport::ShmArena* arena, const Params& params) {
  const auto cap = static_cast<size_t>(params.posted_by_address);
  if (arena == nullptr) return cap;
  const int threads = reduce_threads::requestedReduceThreads(params.reduce_threads,
                                                             arena->hostCpus(), arena->localSize());
  return threads > 1 ? std::min(cap, kThreadedByAddressMax) : cap;
}

}  // namespace

PostedCollectives::PostedCollectives(transport::ShmArena* arena, transport::Transport* transport,
                                     const Params& params, Requeue requeue)
    : arena_(arena),
      transport_(transport),
      size_(transport != nullptr ? transport->size() : 0),
      spin_us_(params.spin_us),
      requeue_(std::move(requeue)),
      refuse_reads_(!params.shm_single_copy),
      board_(openBoard(arena, transport, params)),
      lending_(board_ ? openLending(arena, transport, params) : std::nullopt),
      slots_(board_ ? &*board_ : nullptr, lending_ ? byAddressCap(arena, params) : 0) {
  const double patience_s = std::clamp(params.timeout_s / 8, 0.01, 1.0);
  patience_ =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(patience_s));
  read_timeout_ =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(params.timeout_s));
  if (!board_) return;
  watched_ = std::make_unique<std::atomic<bool>[]>(board_->numSlots());
  claimed_ = std::make_unique<std::atomic<uint64_t>[]>(board_->numSlots());
}

void PostedCollectives::learn(const Response& r, bool may_add, std::shared_ptr<Handle> negotiated) {
  if (!enabled()) return;
  std::lock_guard<std::mutex> lock(mu_);
  // Every rank built its board before any response could be negotiated: the peers' lines are
  // there to read.
  if (lending_) lending_->probe(refuse_reads_);
  slots_.learn(r, may_add, std::move(negotiated));
}

FastPath::PostResult PostedCollectives::tryPost(const Call& c, std::shared_ptr<Handle>* handle) {
  if (!enabled() || c.set != 0) return PostResult::kNotPosted;
  // The lookup key without an allocation per call (the buffer keeps its capacity).
  thread_local std::string key;
  key.assign(c.name.data(), c.name.size());
  std::unique_lock<std::mutex> lock(mu_);
  if (closed_) return PostResult::kNotPosted;
  const int64_t found = slots_.find(key);
  if (found < 0) return PostResult::kNotPosted;
  const auto index = static_cast<size_t>(found);
  PostSlot& s = slots_[index];
  if (inFlightLocked(index)) return PostResult::kInFlight;
  if (s.dead) return PostResult::kNotPosted;
  const bool cuda = !c.inputs.empty() && c.inputs[0].device >= 0;
  // Done means the negotiated run left the engine's in-flight names (handles complete after).
  const bool lend = s.from_posts.lends && lending_->everyoneReads();
  if (!PostSlots::postable(c.op, cuda, c.inputs.size()) || !PostSlots::matches(s, c) ||
      !PostSlots::fitsCallerOutput(s, c, board_->size()) ||
      (s.negotiated && !s.negotiated->done()) || (s.address_only && !lend)) {
    // Negotiated instead: so are every rank's posts of the name, from the revocation on.
    board_->revoke(index, 0);
    s.dead = true;
    return PostResult::kNotPosted;
  }
  s.negotiated.reset();
  const void* input = c.inputs[0].data;
  void* output = c.outputs.empty() ? nullptr : c.outputs[0];
  const uint64_t gen = s.gen + 1;
  stage(s, gen, input, lend);
  if (!board_->publish(index)) {
    s.dead = true;
    return PostResult::kNotPosted;
  }
  s.gen = gen;
  if (c.opened != nullptr) return openLocked(c, input, index, gen);
  const PostResult watched = watchCaller(c, input, output, index, gen, lock);
  if (watched != PostResult::kPosted) return watched;
  pendLocked(index, gen, input, output, !c.blocking, handle);
  return PostResult::kPosted;
}

void PostedCollectives::stage(PostSlot& s, uint64_t gen, const void* input, bool lend) {
  const int me = board_->rank();
  unsigned char* mine = board_->payload(me, gen, s.offset);
  const bool gives = s.kind == OpType::kAllgather ? s.meta.bytes() > 0 : s.root == me;
  s.lent = lend && gives;
  if (s.from_posts.lends) {
    collectives::PostLending::describe(board_->payload(me, gen, s.from_posts.lend_offset),
                                       s.lent ? input : nullptr);
  }
  if (PostSlots::reduces(s.kind) && s.prescale != 1.0) {
    kernels::scaleCopy(mine, input, static_cast<size_t>(s.meta.numElements()), s.meta.dtype,
                       s.prescale);
  } else if (!s.lent && (s.kind != OpType::kBroadcast || s.root == me)) {
    std::memcpy(mine, input, s.meta.bytes());
  }
}

void PostedCollectives::pendLocked(size_t index, uint64_t gen, const void* input, void* output,
                                   bool timed, std::shared_ptr<Handle>* handle) {
  PostSlot& s = slots_[index];
  s.pending = Handle::create(s.name, timed);
  s.pending_id = s.pending->id();
  ids_.add(s.pending_id, {index, gen, s.lent});
  claimed_[index].store(2 * (gen - 1), std::memory_order_relaxed);  // before anyone sees it
  s.input = input;
  s.output = output;
  s.unread_since = s.unread_check = Clock::time_point{};
  s.pending_pos = pending_slots_.size();
  pending_slots_.push_back(index);
  pending_count_.fetch_add(1, std::memory_order_release);
  *handle = s.pending;
  if (board_->state(index, gen) == PostBoard::State::kComplete) ringPeers();
}

FastPath::PostResult PostedCollectives::openLocked(const Call& c, const void* input, size_t index,
                                                   uint64_t gen) {
  const PostSlot& s = slots_[index];
  // The generation's last post rings now: peers that listen should not wait for this caller's
  // output to be made.
  if (board_->state(index, gen) == PostBoard::State::kComplete) ringPeers();
  if (s.kind == OpType::kAllgather) *c.gather_shape = s.out_shape;
  *c.opened = OpenedPost{s.kind, c.name, index, gen, input};
  // The caller's alone until finishOpened(), as a watched post (watchBlocking()).
  watched_[index].store(true, std::memory_order_relaxed);
  return PostResult::kOpened;
}

FastPath::PostResult PostedCollectives::finishOpened(const OpenedPost& o, void* output,
                                                     std::shared_ptr<Handle>* handle) {
  std::unique_lock<std::mutex> lock(mu_, std::defer_lock);
  const PostResult watched =
      watchMarked(board_->state(o.slot, o.gen), o.input, output, o.slot, o.gen, lock);
  if (watched != PostResult::kPosted) return watched;
  // Late or revoked: an allgather's result goes to the handle's own output, which the caller may
  // drop with the handle.
  pendLocked(o.slot, o.gen, o.input, slots_[o.slot].kind == OpType::kAllgather ? nullptr : output,
             false, handle);
  return PostResult::kPosted;
}

bool PostedCollectives::inFlightLocked(size_t index) {
  PostSlot& s = slots_[index];
  // Settled by a waiting caller that has not dropped it yet: no longer in flight.
  dropCompletedLocked(s);
  return s.pending || watched_[index].load(std::memory_order_acquire);
}

void PostedCollectives::dropCompletedLocked(PostSlot& s) {
  if (s.pending && s.pending->done()) {
    s.pending.reset();
    dropPendingLocked(s);
  }
}

bool PostedCollectives::claim(size_t index, uint64_t gen) {
  uint64_t expected = 2 * gen - 2;
  return claimed_[index].compare_exchange_strong(expected, 2 * gen, std::memory_order_acq_rel);
}

void PostedCollectives::dropPendingLocked(PostSlot& s) {
  ids_.remove(s.pending_id);
  const size_t pos = s.pending_pos;
  const size_t last = pending_slots_.back();
  pending_slots_[pos] = last;
  slots_[last].pending_pos = pos;
  pending_slots_.pop_back();
  pending_count_.fetch_sub(1, std::memory_order_release);
}

std::optional<PostedCollectives::Claim> PostedCollectives::claimLocked(
    size_t index, const Clock::time_point* now) {
  PostSlot& s = slots_[index];
  if (!s.pending) return std::nullopt;
  PostBoard::State st = board_->state(index, s.gen);
  if (st == PostBoard::State::kWaiting) {
    if (now == nullptr || *now - submittedAt(*s.pending) < patience_) return std::nullopt;
    // Waited too long: the negotiated path finds out why (a stall, a lost rank, a join).
    st = board_->revoke(index, s.gen);
    PERSEUS_LOG(DEBUG, kEngine) << "posted " << opTypeName(s.kind) << " '" << *s.name
                                << "' waited past its patience for the other ranks' posts; "
                                   "it is negotiated instead";
  }
  if (st == PostBoard::State::kComplete && s.lent) return claimLentLocked(index, now);
  if (!claim(index, s.gen)) return std::nullopt;  // a waiting caller settles it (progress())
  if (st == PostBoard::State::kRevoked) s.dead = true;
  Claim c;
  if (st != PostBoard::State::kComplete) {
    // Back to the queue as the entry it would have been without a slot.
    auto e = std::make_unique<Entry>();
    e->request.op = s.kind;
    e->request.name = *s.name;
    e->request.process_set = 0;
    e->request.tensors.push_back(s.meta);
    e->request.reduce_op = s.reduce_op;
    e->request.prescale = s.prescale;
    e->request.postscale = s.postscale;
    e->request.root = s.root;
    e->inputs.push_back(s.input);
    e->outputs.push_back(s.output);
    e->submitted = submittedAt(*s.pending);
    e->handle = s.pending;
    c.renegotiate = std::move(e);
  }
  c.slot = &s;
  c.input = s.input;
  c.output = s.output;
  c.gen = s.gen;
  c.handle = std::move(s.pending);
  dropPendingLocked(s);
  return c;
}

void PostedCollectives::settle(Claim c) {
  if (c.renegotiate) {
    requeue_(std::move(c.renegotiate));
    return;
  }
  if (c.lent) return settleLent(std::move(c));
  const int err = finish(*c.slot, c.gen, c.input, c.output, c.handle.get());
  if (err == 0) return c.handle->complete(StatusCode::kOk, "");
  const Failure f = readFailure(*c.slot, err);
  c.handle->complete(f.code, f.message);
}

int PostedCollectives::finish(const PostSlot& s, uint64_t gen, const void* input, void* output,
                              Handle* handle) {
  // The generation's payloads stay put until this rank posts again (post_board.h).
  // A library-owned output unless the result goes to a caller's buffer: an into-call's (Note
  // [Allgather into]) or an opened call's (finishOpened).
  if ((s.kind == OpType::kAllgather || s.kind == OpType::kReducescatter) && output == nullptr) {
    std::vector<OwnedTensor>& outs = handle->outputs();  // a library-owned output
    outs.resize(1);
    outs[0].allocate(s.meta.dtype, s.out_shape);
    output = outs[0].ptr();
  }
  const int err = collectives::finishFromPosts(*board_, lending_ ? &*lending_ : nullptr, gen,
                                               s.from_posts, input, output);
  // Counted also after a failed read: a peer waits for the count, not for the bytes.
  if (s.from_posts.lends && lending_->readAll(s.index, gen)) ringPeers();
  if (s.kind == OpType::kAllreduce) completed_allreduces_.fetch_add(1, std::memory_order_relaxed);
  completed_.fetch_add(1, std::memory_order_relaxed);
  return err;
}

bool PostedCollectives::progress(Handle& handle) {
  PostIds::Posted p;
  if (!hasPending() || !ids_.find(handle.id(), &p)) return false;
  // A watching caller reads the shared word only: its lock would slow the settling thread.
  const PostBoard::State st = board_->state(p.slot, p.gen);
  if (st == PostBoard::State::kWaiting) return true;
  if (st == PostBoard::State::kComplete) {
    // The common case, on the thread that waits for the result: settled and completed before
    // any lock, the bookkeeping after. A waiter's path runs cold after a long watch; with the
    // lock, the claim and the pending list first, the step's last tensor completed later at
    // 1000 tensors per step (`perseusrun -np 2 python bench/probes/negotiation_lag_probe.py`).
    if (p.lent) return progressLent(handle, p.slot, p.gen);
    if (!claim(p.slot, p.gen)) return true;  // the engine thread has it
    const PostSlot& s = slots_[p.slot];
    const int err = finish(s, p.gen, s.input, s.output, &handle);
    const Failure f = err == 0 ? Failure{} : readFailure(s, err);
    handle.complete(f.code, f.message);
    std::lock_guard<std::mutex> lock(mu_);
    dropCompletedLocked(slots_[p.slot]);  // unless a submission of the name dropped it already
    return false;
  }
  std::optional<Claim> c;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (slots_[p.slot].pending.get() != &handle) return false;
    c = claimLocked(p.slot, nullptr);
  }
  if (!c) return true;
  settle(std::move(*c));
  return false;
}

void PostedCollectives::progressAll() {
  if (!hasPending()) return;
  const auto now = Clock::now();
  if (!listeningWanted() && now < next_sweep_) return;
  next_sweep_ = now + kSweepPeriod;
  resumed_ = last_sweep_ != Clock::time_point{} && now - last_sweep_ > patience_;
  last_sweep_ = now;
  std::vector<size_t> slots;
  {
    std::lock_guard<std::mutex> lock(mu_);
    slots = pending_slots_;
  }
  // A few slots per hold of the lock: a caller that watches its own post must not wait for a
  // scan of thousands (the step's last tensor took longer with 1000 per step).
  constexpr size_t kPerHold = 32;
  std::vector<Claim> claims;
  for (size_t begin = 0; begin < slots.size(); begin += kPerHold) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (size_t i = begin; i < std::min(slots.size(), begin + kPerHold); ++i) {
        if (std::optional<Claim> c = claimLocked(slots[i], &now)) claims.push_back(std::move(*c));
      }
    }
    for (Claim& c : claims) settle(std::move(c));
    claims.clear();
  }
}

void PostedCollectives::revokeAll() {
  if (!enabled()) return;
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].dead) continue;
    board_->revoke(i, 0);
    slots_[i].dead = true;
  }
}

std::vector<std::pair<OpType, std::shared_ptr<Handle>>> PostedCollectives::close() {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
  std::vector<std::pair<OpType, std::shared_ptr<Handle>>> left;
  for (size_t index : pending_slots_) {
    ids_.remove(slots_[index].pending_id);
    left.emplace_back(slots_[index].kind, std::move(slots_[index].pending));
  }
  pending_slots_.clear();
  pending_count_.store(0, std::memory_order_release);
  return left;
}

}  // namespace perseus::engine
