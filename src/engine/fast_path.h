// The door of the post lane: what the engine's parts see of a path that finishes some calls
// without negotiating them (Note [Posted collectives], engine/posted/posted_collectives.h).
//
// Contract: any thread, unless a method says otherwise. The lane owns its posts, their handles
// until they settle, and which slot and generation each handle was posted in. A post that falls
// back leaves through the `requeue` its implementation was built with, as the Entry it would
// have been, and flows one way: lane -> requeue -> Submissions. Nothing calls back into it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "engine/call.h"
#include "engine/entry.h"
#include "engine/handle.h"
#include "negotiation/request.h"

namespace perseus::engine {

class FastPath {
 public:
  using Requeue = std::function<void(std::unique_ptr<Entry>)>;
  enum class PostResult {
    kPosted,     // *handle completes once every rank posted, or after falling back
    kNotPosted,  // negotiate the call (if its name had a slot, the slot is revoked)
    kInFlight,   // the name has a post in flight: a duplicate
    kFinished,   // a blocking call finished on the calling thread (no handle)
    kClosed,     // a blocking call that the engine's stop overtook
    kOpened,     // a call with Call::opened published, for its caller to finish (finishOpened)
  };
  // How the engine thread may sleep: no longer than `sleep`; `listening`: peers ring it when a
  // post completes, until awake().
  struct IdleHint {
    std::chrono::microseconds sleep;
    bool listening = false;
  };
  // A sleep that only work ends (a submission, bytes or a ring from a peer, a shutdown).
  static constexpr std::chrono::microseconds kUntilWoken{std::chrono::hours(1)};
  struct Counts {
    uint64_t allreduces = 0, collectives = 0;  // posts completed from the board
  };

  virtual ~FastPath() = default;
  virtual bool enabled() const = 0;

  // Engine::submit offers every call here first; the only place that decides what is posted.
  virtual PostResult tryPost(const Call& c, std::shared_ptr<Handle>* handle) = 0;
  // Finishes an opened post (Call::opened) into `output`, which holds its result (an
  // allgather's shape as opened): watched as a blocking call's post is. kFinished, or kPosted
  // with *handle to wait for (an allgather's result then in its library-owned output), or
  // kClosed. Exactly once per opened post, on any thread.
  virtual PostResult finishOpened(const OpenedPost& opened, void* output,
                                  std::shared_ptr<Handle>* handle) = 0;
  // The cycle's holder, for every response of the global set before its entries complete:
  // may give the name a slot (`may_add`) once `negotiated` (this rank's handle, or null) is done.
  virtual void learn(const Response& r, bool may_add, std::shared_ptr<Handle> negotiated) = 0;

  // Settles `handle`'s post if it can; false once it is no pending post of the lane.
  virtual bool progress(Handle& handle) = 0;
  // A caller that waits: watches the post for `spin_us` while the other ranks keep posting.
  // True when it is still pending after that: the engine thread is wanted to listen for it.
  virtual bool watch(Handle& handle, int64_t spin_us) = 0;
  // A callback was attached: true when the engine thread is wanted to listen for the post.
  virtual bool listenFor(Handle& handle) = 0;
  // The cycle's holder: settles what can be, every post when someone needs them promptly,
  // else at most once per sweep period of the lane.
  virtual void progressAll() = 0;

  // The engine thread, about to sleep; awake() after the sleep.
  virtual IdleHint idleHint() = 0;
  virtual void awake() = 0;

  virtual void revokeAll() = 0;  // join(): every name goes back to negotiation
  // The engine stops: every pending post's collective and handle, to fail; no posts after it.
  virtual std::vector<std::pair<OpType, std::shared_ptr<Handle>>> close() = 0;
  virtual Counts counts() const = 0;
};

}  // namespace perseus::engine
