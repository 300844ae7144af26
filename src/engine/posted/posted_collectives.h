// Small allreduces, broadcasts, allgathers and reducescatters of the global set that skip
// negotiation once their name is known.
//
// Note [Posted collectives]
// A negotiated cycle costs two exchanges (the control vector, then the collective) and the
// hand-offs between threads; for a 1 KiB allreduce that is most of the time (docs/algorithms.md,
// "Posted collectives"). When every rank of the job shares one host, a small CPU collective whose
// name was negotiated before needs neither: each rank posts its contribution in its own
// shared-memory pool and counts the post in the name's slot (post_board.h); whoever sees all
// the posts of a generation finishes the operation from them itself: an allreduce reduces
// every rank's (prescaled) input in rank order, so every rank gets the same bits; a
// reducescatter reduces its own block of rows of every post the same way; a broadcast copies
// the root's; an allgather copies every rank's piece in rank order. No rank waits for
// another to take part: the caller's thread posts and, when it waits, finishes; the engine
// thread finishes the posts that nobody waits for. Every rank posts every generation, also a
// broadcast's non-roots (an empty post): that is what lets a pool be rewritten safely.
//  - Slots: the engine gives a name a slot when it runs the name's response in the global set
//    (learn()). Every rank runs the same responses in the same order, and the slots and pool
//    offsets are handed out in that order, so a name has the same slot everywhere. The
//    response runs before its handles complete, so a rank's next submission of the name (which
//    must wait for that completion) finds the slot from the name's second negotiated run on
//    (PostSlots::learn(), post_slots.h); the slot takes posts once this rank's negotiated handle
//    completed (until then the name is still in flight). The slot
//    remembers what was negotiated: the shapes (an allgather's rows of every rank), the dtype,
//    the reduce op and scales, the root. Slots and pool space are never reused; when they run
//    out, names stay on the negotiated path, and so does a name that had kMaxSlotsPerName
//    slots (the count is the same on every rank). A rank that cannot post
//    (PERSEUS_POSTED_ALLREDUCE=0, a timeline, no post board) says so in every negotiation
//    (ControlFlag::kNoPosts), and from that cycle on no rank gives out slots.
//  - Falling back: a submission that differs from its name's slot (shape, dtype, op, scaling,
//    root, a group or another collective) revokes the slot, and so does a post that waited
//    longer than the patience (PERSEUS_TIMEOUT / 8, within [10 ms, 1 s]), and join() revokes
//    every slot. Revoking freezes the slot's count (post_board.h): generations already
//    complete finish from the slot on every rank, the others go back to the queue and are
//    negotiated like any request, where mismatches, stalls, joined ranks and lost ranks are
//    found and reported as usual (an allgather whose rows changed on one rank is simply
//    negotiated with the new rows). A name whose slot was revoked gets a new slot at its next
//    negotiated run (while no rank has joined).
//  - The post path is lean: every call reaches tryPost() as a Call of tensor views (call.h),
//    before anything is allocated for it; a post is kept in its slot (handle, input and output
//    pointers), not as an Entry, and its name is in flight by being pending there rather than
//    in the engine's in-flight set (a call of the name that is not posted revokes the slot in
//    tryPost(), or is a duplicate). A post that falls back becomes an Entry then. At 1 KiB the
//    entry, its vectors and the in-flight name were ~0.5 us of a 0.9 us operation
//    (docs/algorithms.md, "The post lane").
//  - Who finishes a post: the caller that waits for it (it watches its slot for
//    PERSEUS_SPIN_US, and settles and completes the post before it takes any lock: claim()),
//    else the engine thread, every millisecond while posts are pending. When
//    a callback waits for a post, or a caller stopped watching and blocks, the engine thread
//    listens instead: the post that completes a generation rings it. Ringing on every post
//    would wake engine threads that have nothing to do, taking the core from the watcher (a
//    reschedule interrupt per operation) or from a loop that submits thousands of tensors.
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
#include "common/params.h"
#include "engine/call.h"
#include "engine/entry.h"
#include "engine/exec/executor.h"
#include "engine/handle.h"
#include "engine/posted/post_slots.h"
#include "transport/shm/shm_arena.h"
#include "transport/transport.h"

namespace perseus::engine {

class PostedCollectives;

// How a caller watches a pending post (Engine::waitFor, a blocking post): it spins for
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

class PostedCollectives {
 public:
  static constexpr size_t kMaxBytes = PostSlots::kMaxBytes;
  static constexpr int kMaxSlotsPerName = PostSlots::kMaxSlotsPerName;

  // Enabled only when `arena` holds every rank of `transport`'s job (>= 2) and has a shared
  // area for the post board (collectives/post_board.h). Posts that complete a generation ring
  // the ranks that listen through `transport` (Transport::ring()); both outlive this.
  PostedCollectives(transport::ShmArena* arena, transport::Transport* transport,
                    const Params& params);
  bool enabled() const { return board_.has_value(); }

  // The cycle's holder, for every response the global set runs, before its entries complete.
  // `may_add`: false while some rank has joined, and for good once some rank cannot post
  // (PERSEUS_POSTED_ALLREDUCE=0 or a timeline there): old slots are retired, none is given.
  // `negotiated`: this rank's handle of the response (null if it has none): the new slot
  // takes posts only once it completed, when the name is no longer in flight here.
  void learn(const Response& r, bool may_add, std::shared_ptr<Handle> negotiated);

  // Any thread: Engine::submit() offers every call here first, and this is the one place that
  // decides whether a call is posted (PostSlots::postable(), matches()). kPosted: a single CPU
  // tensor of the global set whose name has a live slot with the same metadata, and whose
  // negotiated run completed; `*handle` (its postedSlot() set) completes once every rank posted, or
  // after falling back to negotiation. kNotPosted: nothing was posted; the caller negotiates the
  // call, and if its name had a live slot that slot is revoked, so that every rank's posts of
  // it go the negotiated way, which reports any difference in the metadata. kInFlight: the
  // name has a post in flight (a duplicate). kFinished: a blocking call whose generation
  // completed while its caller watched, settled on the calling thread (no handle). kClosed: a
  // blocking call that did not complete before the engine stopped.
  enum class Outcome { kPosted, kNotPosted, kInFlight, kFinished, kClosed };
  Outcome tryPost(const Call& c, std::shared_ptr<Handle>* handle);

  // A settled post: complete (its output written), or back to negotiation in `renegotiate`.
  struct Settled {
    std::shared_ptr<Handle> handle;
    std::unique_ptr<Entry> renegotiate;
  };
  // Any thread: settles the post of `handle` (postedSlot() >= 0) if it can. Reads only the
  // shared state word until the post can be settled. A complete generation is finished and
  // `handle` completed right here (false: nothing left to the caller); true when `*out` holds
  // the post to send back to negotiation (its slot was revoked).
  bool progress(Handle& handle, Settled* out);
  // Any thread: settles every post that can be.
  void progressAll(std::vector<Settled>* out);
  bool hasPending() const { return pending_count_.load(std::memory_order_acquire) > 0; }

  // The engine thread, before it sleeps with posts pending that no caller watches: asks the
  // other ranks to ring it when they complete a generation. False (and not listening) when a
  // post can be settled already.
  bool listen();
  void stopListening();
  // Someone needs the engine thread to finish pending posts promptly: a callback is attached
  // to one, or a caller stopped watching its post and blocks. Without it the engine thread
  // finishes posts every millisecond, and waiting callers finish their own: being rung for
  // every post of a loop that submits thousands costs the submitting thread its core.
  // seq_cst: Dekker with the engine thread's idle wait (the caller then reads whether it
  // sleeps, the engine thread sets that it sleeps and then reads this).
  void wantListening() { listen_wanted_.store(true, std::memory_order_seq_cst); }
  // True when wanted and posts are pending; forgets the wish once none is.
  bool listeningWanted() {
    if (!hasPending()) listen_wanted_.store(false, std::memory_order_relaxed);
    return listen_wanted_.load(std::memory_order_seq_cst) && hasPending();
  }

  // join(): every live slot is revoked.
  void revokeAll();
  // The engine stops: returns every pending post's collective and handle (to fail); tryPost()
  // refuses from now on.
  std::vector<std::pair<OpType, std::shared_ptr<Handle>>> close();

  // Posts completed from the board: allreduces, and every kind.
  uint64_t completedAllreducePosts() const {
    return completed_allreduces_.load(std::memory_order_relaxed);
  }
  uint64_t completedPosts() const { return completed_.load(std::memory_order_relaxed); }
  // The other ranks' posts so far (0 when disabled): moving means they are still submitting.
  uint64_t othersPosts() const { return enabled() ? board_->othersPosts() : 0; }

 private:
  // What a settling thread needs once it let go of the lock.
  struct Claim {
    const PostSlot* slot = nullptr;  // its learned part (immutable; slots never move)
    std::shared_ptr<Handle> handle;
    std::unique_ptr<Entry> renegotiate;  // null when complete
    const void* input = nullptr;
    void* output = nullptr;
    uint64_t gen = 0;
  };
  // A blocking call, published as generation `gen` of `index`, with the lock held: watched on
  // the calling thread with no handle, settled there if it completes. Returns kFinished, or
  // kPosted after all (with the lock held again and the handle to come), or kClosed.
  Outcome watchBlocking(const void* input, void* output, size_t index, uint64_t gen,
                        std::unique_lock<std::mutex>& lock);
  // Caller holds mu_. Moves the slot's pending post into a claim when it can be settled.
  // `now`: checks the patience too (null: the caller watches and will hand over in time).
  std::optional<Claim> claimLocked(size_t slot, const std::chrono::steady_clock::time_point* now);
  // Any thread: the right to settle generation `gen` of the slot's pending post, given once
  // (the engine thread's sweep and a waiting caller may both see it complete).
  bool claim(size_t slot, uint64_t gen);
  // Caller holds mu_. Whether the slot has a post in flight (a submission of its name now is a
  // duplicate); drops a pending post whose handle completed already.
  bool inFlightLocked(size_t slot);
  // Caller holds mu_. Drops the slot's pending post if its handle completed: a waiting caller
  // completes it before it takes the lock (progress()).
  void dropCompletedLocked(PostSlot& s);
  void dropPendingLocked(PostSlot& s);
  Settled settle(Claim c);
  // Writes a complete generation's result (collectives/from_posts.h): into `output`, or for an
  // allgather or a reducescatter into `handle`'s library-owned output (`handle` may be null
  // for the others).
  void finish(const PostSlot& s, uint64_t gen, const void* input, void* output, Handle* handle);
  void ringPeers() const;

  transport::Transport* const transport_;
  const int size_;
  const int64_t spin_us_;  // how long a blocking caller watches its post before it has a handle
  std::chrono::steady_clock::duration patience_{};
  std::optional<collectives::PostBoard> board_;

  mutable std::mutex mu_;
  bool closed_ = false;
  PostSlots slots_;  // guarded by mu_ (post_slots.h)
  std::vector<size_t> pending_slots_;
  // Per slot: a blocking caller watches a post of it with no handle. Set under mu_, cleared by
  // that caller without it; tryPost() takes it as a post in flight.
  std::unique_ptr<std::atomic<bool>[]> watched_;
  // Per slot: the last generation claimed for settling (claim()); tryPost() sets it to the one
  // before the generation it publishes.
  std::unique_ptr<std::atomic<uint64_t>[]> claimed_;
  std::atomic<size_t> pending_count_{0};
  std::atomic<bool> listen_wanted_{false};
  std::atomic<uint64_t> completed_{0};
  std::atomic<uint64_t> completed_allreduces_{0};
};

}  // namespace perseus::engine
