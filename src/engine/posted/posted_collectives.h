// The post lane: small allreduces, broadcasts, allgathers and reducescatters of the global set
// that skip negotiation once their name is known. The engine's parts see it only through its
// door, FastPath (engine/fast_path.h).
//
// Note [Posted collectives]
// A negotiated cycle costs two exchanges (the control vector, then the collective) and the
// hand-offs between threads; for a 1 KiB allreduce that is most of the time (docs/algorithms.md,
// "Posted collectives"). When every rank of the job shares one host, a small CPU collective whose
// name was negotiated before needs neither: each rank posts its contribution in its own
// shared-memory pool and counts the post in the name's slot (collectives/post_board.h); whoever
// sees all the posts of a generation finishes the operation from them itself: an allreduce
// reduces every rank's (prescaled) input in rank order, so every rank gets the same bits; a
// reducescatter reduces its own block of rows of every post the same way; a broadcast copies
// the root's; an allgather copies every rank's piece in rank order (collectives/from_posts.h).
// No rank waits for another to take part. Every rank posts every generation, also a broadcast's
// non-roots (an empty post): that is what lets a pool be rewritten safely.
//  - Slots (post_slots.h): the cycle's holder shows the lane every response of the global set
//    before its entries complete (learn()). Every rank runs the same responses in the same
//    order, and slots and pool offsets are handed out in that order, so a name has the same
//    slot everywhere. A name gets one at its second negotiated run; the slot takes posts once
//    this rank's negotiated handle completed (until then the name is in flight) and remembers
//    what was negotiated (shapes, dtype, reduce op and scales, root). Slots and pool space are
//    never reused: when they run out, names stay negotiated, as does a name that had
//    kMaxSlotsPerName slots. A rank that cannot post (PERSEUS_POSTED_ALLREDUCE=0, a timeline,
//    no post board) says so in every negotiation (ControlFlag::kNoPosts), and from that cycle
//    on no rank gives out slots.
//  - The lane is lean: every call reaches tryPost() as a Call of tensor views (call.h), before
//    anything is allocated; a pending post lives in its slot (handle, input and output
//    pointers), not as an Entry, and its name is in flight by being pending there, not in
//    Submissions. The lane keeps which slot and generation each pending handle was posted in,
//    by handle id (post_ids.h): a Handle knows nothing of the lane.
//  - Falling back: a submission that differs from its name's slot (shape, dtype, op, scaling,
//    root, a group or another collective) revokes the slot, and so do a post that waited longer
//    than the patience (PERSEUS_TIMEOUT / 8, within [10 ms, 1 s]) and join() (revokeAll()).
//    Revoking freezes the slot's count (post_board.h): generations already complete finish from
//    the slot on every rank; each other post becomes the Entry it would have been and leaves
//    through `requeue`, one way, to Submissions, where mismatches, stalls, joined ranks and lost
//    ranks are found and reported as for any request. A revoked name gets a new slot at its
//    next negotiated run (while no rank has joined).
//  - Who finishes a post: the rank whose post completes a generation, inside tryPost(); a
//    caller that waits (watch(): it watches the slot's state word for PERSEUS_SPIN_US while the
//    other ranks keep posting, and settles and completes the post before it takes any lock:
//    the path after a long watch runs with cold caches); else the engine thread through
//    progressAll(), once per kSweepPeriod. When a callback waits for a post (listenFor()), or
//    a caller stopped watching and blocks, the engine thread listens instead: idleHint() sets
//    the board's listening flag, and the post that completes a generation rings it through the
//    transport's doorbell. Ringing on every post would wake engine threads that have nothing to
//    do, taking the core from the watcher or from a loop that submits thousands of tensors.
//
// Note [Posts by address]
// A broadcast's root or an allgather's rank with rows may post the address of its own buffer
// instead of a copy in its pool (collectives/post_lending.h); each reader then copies straight
// out of the poster's memory (process_vm_readv), one copy where the pool takes two, and the
// own rows of an allgather come from the rank's own input. For names whose contribution is from
// PostSlots::kMinLendBytes up to PERSEUS_POSTED_BY_ADDRESS per rank (above 64 KiB such a name's
// slot has no room in the pools: posted by address or not at all, and broadcasts only with one
// reader, Note [Broadcast in parts]).
//  - Agreement: every rank reads a byte of every peer's memory at its first learn() (skipped
//    under PERSEUS_SHM_SINGLE_COPY=0) and publishes the answer; a rank lends only while every
//    rank said yes. A post's descriptor (the address, or 0) is in its pool, written before the
//    post is counted, so each reader follows each poster's choice, and ranks that see the
//    answers at different times still agree. A post that can only be made by address when not
//    every rank can read revokes its slot: the name is negotiated, as for a mismatch.
//  - The buffer is the caller's again once its call returns, so a post whose buffer others read
//    (`lent`) completes only once every rank has read the generation: each rank marks the
//    generation read in its own word of the slot after its copies (every generation of such a
//    slot, whether or not anyone lent), and one that sees every mark rings those who listen. A
//    lent post has two stages in claimed_ (2g-1: this rank's read of generation g is taken;
//    2g: settled), so that the reads stay one per rank and no thread ever waits for the peers
//    while it holds a post another thread could settle: a pending lent post is read by whoever
//    first sees its generation complete and stays pending, still in flight, until every rank read
//    it. Only a caller that watches its own post (a blocking broadcast, an opened allgather) waits
//    for the readers on its thread; it holds no other post.
//  - The invariants above hold. Two pools still suffice: a rank posts g + 1 only after its g
//    settled, which for a lent post means everyone read g. Revocation still freezes the count:
//    a generation that completed is read and counted on every rank (claimLocked() settles it
//    whatever the slot's state), one that did not is read by nobody, so its poster may
//    renegotiate at once. Patience applies while a post waits for posts, not for reads: once a
//    generation completed every rank reads it without waiting for anyone. join() and mismatches
//    revoke as before, and the negotiated run that follows reports them by name.
//  - The wait for the readers is bounded, whoever waits (a watching caller in awaitReaders(),
//    else the sweep in unreadLocked(), which every pending post gets, also one that a callback
//    or a blocked caller waits for): once per patience it asks the arena whether the process of
//    a rank that has not read is gone, and fails the post with PeerLostError naming it, as the
//    transport would; after PERSEUS_TIMEOUT it fails it with TimeoutError naming the ranks that
//    have not read. The lender's buffer is never reported read: the handle fails and the slot
//    is retired, so the name is negotiated next, where the loss is found again. An engine that
//    stops (a peer lost in a negotiation, shutdown) fails its pending posts, lent ones too.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "collectives/from_posts.h"
#include "collectives/post_board.h"
#include "collectives/post_lending.h"
#include "common/params.h"
#include "engine/call.h"
#include "engine/entry.h"
#include "engine/fast_path.h"
#include "engine/handle.h"
#include "engine/posted/post_ids.h"
#include "engine/posted/post_slots.h"
#include "transport/shm/shm_arena.h"
#include "transport/transport.h"

namespace perseus::engine {

class PostedCollectives;

// How a caller watches a pending post (watch(), a blocking post): it spins for
// PERSEUS_SPIN_US, and the spin restarts while the other ranks keep posting: they are still
// submitting and will reach this one (blocking would add a wake-up to the step's last
// operation). The clock and the other ranks' post counts are read only once the post did not
// complete at once: reading a count that a peer just wrote costs a cross-core miss per operation.
class PostWatch {
 public:
  PostWatch(const PostedCollectives& posted, int64_t spin_us)
      : posted_(posted), spin_(std::chrono::microseconds(std::max<int64_t>(spin_us, 0))) {}
  // Once per look at the post: false once the spin expired. Yields the core now and then (the
  // last rank may need it).
  bool keepWatching();

 private:
  const PostedCollectives& posted_;
  const std::chrono::steady_clock::duration spin_;
  std::chrono::steady_clock::time_point until_{};
  uint64_t others_ = 0;
  uint32_t looks_ = 0;
};

class PostedCollectives final : public FastPath {
 public:
  static constexpr size_t kMaxBytes = PostSlots::kMaxBytes;
  static constexpr int kMaxSlotsPerName = PostSlots::kMaxSlotsPerName;
  // How often the engine thread settles the posts that nobody needs promptly. A sweep scans
  // every pending post: done on each turn of the engine loop, it took the core from the
  // framework thread that was submitting them.
  static constexpr std::chrono::microseconds kSweepPeriod{1000};
  // The longest the engine thread sleeps while posts are pending: their patience (>= 10 ms)
  // is checked by the sweeps, and a ring ends the sleep sooner for posts someone needs.
  static constexpr std::chrono::microseconds kPendingSleep{2000};
  // The longest it sleeps with none pending: a post made meanwhile wakes nobody (a wake-up per
  // post would cost the poster a syscall), so one that nobody waits for through the engine (a
  // bare Handle::wait) is settled by the engine thread's next look, at most this much later.
  static constexpr std::chrono::microseconds kIdleSleep{100000};

  // Enabled only when `arena` holds every rank of `transport`'s job (>= 2) and has a shared
  // area for the post board (collectives/post_board.h). Posts that complete a generation ring
  // the ranks that listen through `transport` (Transport::ring()); both outlive this. A post
  // that falls back goes to `requeue`, on whichever thread settled it, without a lock held.
  PostedCollectives(transport::ShmArena* arena, transport::Transport* transport,
                    const Params& params, Requeue requeue);

  // FastPath (engine/fast_path.h); Note [Posted collectives] above.
  bool enabled() const override { return board_.has_value(); }
  // kPosted: a single CPU tensor of the global set whose name has a live slot with the same
  // metadata (PostSlots::postable(), matches()), and whose negotiated run completed.
  PostResult tryPost(const Call& c, std::shared_ptr<Handle>* handle) override;
  PostResult finishOpened(const OpenedPost& opened, void* output,
                          std::shared_ptr<Handle>* handle) override;
  void learn(const Response& r, bool may_add, std::shared_ptr<Handle> negotiated) override;
  bool progress(Handle& handle) override;
  bool watch(Handle& handle, int64_t spin_us) override;
  bool listenFor(Handle& handle) override;
  void progressAll() override;
  IdleHint idleHint() override;
  void awake() override;
  void revokeAll() override;
  std::vector<std::pair<OpType, std::shared_ptr<Handle>>> close() override;
  Counts counts() const override {
    return {completed_allreduces_.load(std::memory_order_relaxed),
            completed_.load(std::memory_order_relaxed)};
  }

  // The other ranks' posts so far (0 when disabled): moving means they are still submitting.
  uint64_t othersPosts() const { return enabled() ? board_->othersPosts() : 0; }

 private:
  // Why a post failed: its status, the message its handle carries, and for kPeerLost the rank
  // that was lost.
  struct Failure {
    StatusCode code = StatusCode::kOk;
    std::string message;
    int rank = -1;
  };
  // What a settling thread needs once it let go of the lock.
  struct Claim {
    const PostSlot* slot = nullptr;  // its learned part (immutable; slots never move)
    std::shared_ptr<Handle> handle;
    std::unique_ptr<Entry> renegotiate;  // null when complete
    const void* input = nullptr;
    void* output = nullptr;
    uint64_t gen = 0;
    // A lent post (Note [Posts by address]): `read` this rank's copies of it (the handle stays
    // pending), else only complete the handle (everyone has read it).
    bool lent = false, read = false;
    Failure failure;  // a lent post whose readers were lost or timed out: its handle fails
  };
  bool hasPending() const { return pending_count_.load(std::memory_order_acquire) > 0; }
  // Someone needs the engine thread to settle pending posts promptly: a callback is attached
  // to one, or a caller stopped watching its post and blocks. seq_cst: Dekker with the engine
  // thread's idle wait (the caller then reads whether it sleeps, the engine thread sets that it
  // sleeps and then reads this, in idleHint()).
  void wantListening() { listen_wanted_.store(true, std::memory_order_seq_cst); }
  // True when wanted and posts are pending; forgets the wish once none is.
  bool listeningWanted() {
    if (!hasPending()) listen_wanted_.store(false, std::memory_order_relaxed);
    return listen_wanted_.load(std::memory_order_seq_cst) && hasPending();
  }
  // Sets the board's listening flag; false (and not listening) when a post can be settled now.
  bool listen();
  // With the lock held: writes this rank's post of generation `gen` of `s` (its input into its
  // pool, or with `lend` its descriptor: Note [Posts by address]) before it is counted.
  void stage(PostSlot& s, uint64_t gen, const void* input, bool lend);
  // Call `c`, published as generation `gen` of `index`, with the lock held: watchBlocking() for
  // a blocking call its caller can watch (an allreduce, a broadcast), else kPosted at once.
  PostResult watchCaller(const Call& c, const void* input, void* output, size_t index, uint64_t gen,
                         std::unique_lock<std::mutex>& lock);
  // Call `c` with Call::opened, published as generation `gen` of `index`, with the lock held:
  // handed to its caller as a watched post (watched_), to finish with finishOpened().
  PostResult openLocked(const Call& c, const void* input, size_t index, uint64_t gen);
  // With the lock held: generation `gen` of `index` becomes the slot's pending post, whose new
  // handle goes to *handle (`timed`: Handle::create's; false for a blocking call's).
  void pendLocked(size_t index, uint64_t gen, const void* input, void* output, bool timed,
                  std::shared_ptr<Handle>* handle);
  // A blocking call, published as generation `gen` of `index`, with the lock held: watched on
  // the calling thread with no handle, settled there if it completes. Returns kFinished, or
  // kPosted after all (with the lock held again and the handle to come), or kClosed.
  PostResult watchBlocking(const void* input, void* output, size_t index, uint64_t gen,
                           std::unique_lock<std::mutex>& lock);
  // The watch itself, for a post already marked watched_ (by watchBlocking() or openLocked()),
  // with `lock` not held and `st` its state as last read: finishes it into `output` on this
  // thread if it completes (kFinished); else unmarks it with the lock taken again, for the
  // caller to make it pending (kPosted), or kClosed.
  PostResult watchMarked(collectives::PostBoard::State st, const void* input, void* output,
                         size_t index, uint64_t gen, std::unique_lock<std::mutex>& lock);
  // Caller holds mu_. Moves the slot's pending post into a claim when it can be settled.
  // `now`: checks the patience too (null: the caller watches and will hand over in time).
  std::optional<Claim> claimLocked(size_t slot, const std::chrono::steady_clock::time_point* now);
  // Any thread: the right to settle generation `gen` of the slot's pending post, given once
  // (the engine thread's sweep and a waiting caller may both see it complete).
  bool claim(size_t slot, uint64_t gen);
  // The two stages of a lent post's settling (Note [Posts by address]): its read, then, once
  // everyone has read, its completion.
  bool claimRead(size_t slot, uint64_t gen);
  bool claimLentDone(size_t slot, uint64_t gen);
  // Caller holds mu_. claimLocked() for a lent post whose generation completed; with `now`
  // (the sweep), one whose readers were lost or timed out fails (unreadLocked()).
  std::optional<Claim> claimLentLocked(size_t slot,
                                       const std::chrono::steady_clock::time_point* now);
  // progress() for a lent post whose generation completed.
  bool progressLent(Handle& handle, size_t slot, uint64_t gen);
  // settle() for a lent post's claim.
  void settleLent(Claim c);
  // After this thread read a lent post (`err`: its read's errno, 0 if it read): completes
  // `handle` once every rank has read generation `gen` (at once when the read failed); false
  // while others still read or when another thread completes it.
  bool completeReadLent(Handle& handle, size_t slot, uint64_t gen, int err);
  // A watching caller, after its copies of a lent post: waits until every rank has read it
  // (they read as soon as they see the generation complete, without waiting for anyone).
  // The failure when a reader was lost or it took longer than PERSEUS_TIMEOUT.
  std::optional<Failure> awaitReaders(const PostSlot& s, uint64_t gen) const;
  // Caller holds mu_; the sweep, at `now`, for the slot's pending lent post that this rank has
  // read and some peer has not: the failure once a reader's process is gone (looked at once
  // per patience) or PERSEUS_TIMEOUT passed since the sweeps first saw it wait.
  std::optional<Failure> unreadLocked(PostSlot& s, std::chrono::steady_clock::time_point now);
  // Generation `gen` of `s`, lent, not read by every rank yet: the failure naming a reader
  // whose process is gone, else with `timed_out` the one naming those that have not read;
  // nullopt while it may still be read (or once it was).
  std::optional<Failure> unreadFailure(const PostSlot& s, uint64_t gen, bool timed_out) const;
  // The first of `ranks` (set ranks) whose process is gone, as PeerLostError names it, the
  // message beginning with the slot's call; `waiting_for` says what this rank was doing.
  std::optional<Failure> lostRank(const PostSlot& s, const std::vector<int>& ranks,
                                  const std::string& waiting_for) const;
  // Throws the exception of `f` (a blocking caller's failure).
  [[noreturn]] static void raise(const Failure& f);
  // Caller holds mu_. The slot takes no more posts: its name is negotiated from now on.
  void retireLocked(size_t slot);
  // Caller holds mu_. Whether the slot's pending post can be settled, or moved on, now.
  bool settleable(size_t slot) const;
  // Caller holds mu_. Whether the slot has a post in flight (a submission of its name now is a
  // duplicate); drops a pending post whose handle completed already.
  bool inFlightLocked(size_t slot);
  // Caller holds mu_. Drops the slot's pending post if its handle completed: a waiting caller
  // completes it before it takes the lock (progress()).
  void dropCompletedLocked(PostSlot& s);
  // Caller holds mu_, after moving or resetting s.pending.
  void dropPendingLocked(PostSlot& s);
  // Completes a claim's handle, or sends its post back to negotiation through requeue_.
  void settle(Claim c);
  // Writes a complete generation's result (collectives/from_posts.h): into `output`, or for an
  // allgather or a reducescatter with a `handle` into its library-owned output (`handle` is
  // null for a blocking call finished on its thread, whose `output` is its own). Counts this
  // rank's read of a slot that may be posted by address. 0, or the errno of a failed read.
  int finish(const PostSlot& s, uint64_t gen, const void* input, void* output, Handle* handle);
  // The failure of a call whose read by address failed: a lost rank when a peer's process is
  // gone, else kInternal.
  Failure readFailure(const PostSlot& s, int err) const;
  void ringPeers() const;

  transport::ShmArena* const arena_;  // tells whether a peer's process is gone (checkPeer())
  transport::Transport* const transport_;
  const int size_;
  const int64_t spin_us_;  // how long a blocking caller watches its post before it has a handle
  const Requeue requeue_;
  std::chrono::steady_clock::duration patience_{};
  std::chrono::steady_clock::duration read_timeout_{};  // PERSEUS_TIMEOUT: awaitReaders()
  const bool refuse_reads_;                             // PERSEUS_SHM_SINGLE_COPY=0
  std::optional<collectives::PostBoard> board_;
  std::optional<collectives::PostLending> lending_;  // null: nothing is posted by address

  mutable std::mutex mu_;
  bool closed_ = false;
  PostSlots slots_;  // guarded by mu_ (post_slots.h)
  std::vector<size_t> pending_slots_;
  PostIds ids_;  // the pending posts' slots and generations by handle id; written under mu_
  // Per slot: a blocking caller watches a post of it with no handle. Set under mu_, cleared by
  // that caller without it; tryPost() takes it as a post in flight.
  std::unique_ptr<std::atomic<bool>[]> watched_;
  // Per slot: 2g when generation g was claimed for settling (claim()), 2g - 1 when a lent
  // post's read was (claimRead()); pendLocked() sets 2(g - 1) for the generation it makes
  // pending.
  std::unique_ptr<std::atomic<uint64_t>[]> claimed_;
  std::atomic<size_t> pending_count_{0};
  std::atomic<bool> listen_wanted_{false};
  std::atomic<int> watchers_{0};  // callers in watch(): the engine thread does not listen
  // The engine thread (the cycle's holder) only:
  std::chrono::steady_clock::time_point next_sweep_{};
  std::chrono::steady_clock::time_point last_sweep_{};
  // This sweep came longer than the patience after the last one (the engine thread ran a long
  // cycle, as the peers may have): waits for reads count from now (unreadLocked()).
  bool resumed_ = false;
  bool listening_ = false;
  std::atomic<uint64_t> completed_{0};
  std::atomic<uint64_t> completed_allreduces_{0};
};

}  // namespace perseus::engine
