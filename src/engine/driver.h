// The driver (Note [Engine cycle], Note [Caller-run cycles] in engine.h): who runs the cycle and
// when. The engine thread's loop and idle wait, caller-run cycles and the engine thread's
// parking, waiting for and polling a handle, the timeline switch, and shutdown.
//
// Contract: it is the only code that takes the cycle lock, and it calls the Cycle (and the post
// lane's progressAll(), idleHint() and awake()) only while holding it. waitFor, streamWait,
// swapTimeline and shutdown: any thread but a completion callback of this engine's cycle; poll,
// setCallback and wakeIfBlocked: any thread; start(): once, by the owner, after everything the
// cycle uses exists. It owns the engine thread and two mutexes, each guarding only what is named:
//   cycle_mu_  the Cycle's state (and the timeline in it): held for a cycle or a swap;
//   park_mu_   nothing but the parked engine thread's sleep (park_cv_).
// shutdown() runs once (shutdown_once_); a second caller returns when the first one is done.
// Its atomics are flags between threads (engine_blocked_, shutdown_requested_,
// drive_requested_, last_drive_ns_), all read without a lock.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "common/params.h"
#include "engine/cycle/cycle.h"
#include "engine/fast_path.h"
#include "engine/handle.h"
#include "engine/submissions.h"
#include "transport/transport.h"

namespace perseus::backends {
class GpuBackend;
}

namespace perseus::engine {

class Driver {
 public:
  struct Parts {
    transport::Transport* transport = nullptr;
    const Params* params = nullptr;
    Submissions* submissions = nullptr;
    FastPath* fast_path = nullptr;  // the post lane: its posts' waits and idle hints
    Cycle* cycle = nullptr;
    // The CUDA ordinal this process uses (-1: none yet): from then on a caller runs cycles
    // only with that device current, and gpu keeps it for the caller (Note [Caller-run
    // cycles]). gpu: null in a build without CUDA.
    const std::atomic<int>* gpu_device = nullptr;
    backends::GpuBackend* gpu = nullptr;
  };

  explicit Driver(Parts parts);
  ~Driver();  // shutdown()
  Driver(const Driver&) = delete;
  Driver& operator=(const Driver&) = delete;

  void start();  // starts the engine thread

  // Engine::waitFor, Engine::streamWait, Engine::poll, Engine::setCallback (engine.h).
  bool waitFor(Handle& handle, double timeout_s, int64_t spin_us);
  void streamWait(Handle& handle, void* stream, int64_t spin_us);
  bool poll(Handle& handle);
  void setCallback(Handle& handle, Handle::Callback cb);

  // Swaps the cycle's timeline under the cycle lock; returns the old one (closed by the caller).
  std::unique_ptr<Timeline> swapTimeline(std::unique_ptr<Timeline> timeline, bool mark_cycles);

  // After a submission was queued: the engine thread hears of it if it blocks (Dekker with
  // idleWait()).
  void wakeIfBlocked() {
    if (engine_blocked_.load()) transport_->wake();
  }

  // Engine::shutdown (engine.h). Idempotent.
  void shutdown();

 private:
  void loop();
  // One turn: runs a cycle if one is due and returns whether it did; *pending: work is left.
  bool step(bool* pending);
  // Engine thread without the lock: sleeps one kParkSlice or until a driver leaves.
  void park();
  // Runs fn holding cycle_mu_, asking the engine thread to give it up between its cycles.
  void withCycleLock(const std::function<void()>& fn);
  bool drivenRecently() const;
  // Whether this turn polls GPU completion (a caller spaces its polls out).
  bool gpuPollDue();
  // What a driving caller waits for: the handle done (waitFor), or its GPU work published
  // (streamWait).
  enum class Until { kDone, kStreamReady };
  static bool reached(const Handle& handle, Until until) {
    return until == Until::kDone ? handle.done() : handle.streamReady();
  }
  // Whether a wait may run cycles on its thread (a zero timeout is a poll).
  bool mayDrive(double timeout_s) const;
  // The waits' driving part: returns when the handle reached `until`, or the cycles stalled
  // for spin_us, or the lock could not be had. False when it did not try: the caller has
  // another CUDA device current than the one this process uses.
  bool drive(const Handle& handle, Until until, int64_t spin_us);
  // `spin`: spin PERSEUS_SPIN_US before blocking; false when the last wait ended with nothing
  // to do (a timeout: work wakes the thread, so spinning again would only take a core).
  void idleWait(bool pending, bool spin);
  // Whether idleWait() must not block: work arrived, or someone wants the cycle lock.
  bool wanted();

  transport::Transport* const transport_;
  const Params& params_;
  Submissions& submissions_;
  FastPath& fast_path_;
  Cycle& cycle_;
  const std::atomic<int>& gpu_device_;
  backends::GpuBackend* const gpu_;

  std::chrono::steady_clock::time_point next_retry_{};  // holder of cycle_mu_
  // True while the engine thread blocks in waitIncoming(): only then does a submission pay for
  // Transport::wake() (a futex/eventfd syscall). Both sides use seq_cst (Dekker): a submission
  // either sees the flag or is seen by the engine's re-check after setting it.
  std::atomic<bool> engine_blocked_{false};
  std::atomic<bool> shutdown_requested_{false};

  // Note [Caller-run cycles]: whoever holds cycle_mu_ runs the Cycle.
  std::mutex cycle_mu_;
  // Holder of cycle_mu_: a caller runs the cycles with the process's CUDA device kept for it,
  // so CUDA work may run on its thread.
  bool caller_gpu_ = false;
  // Holder of cycle_mu_: a caller that waits only for its GPU work to be enqueued asks the GPU
  // about finished work at most once per kCallerGpuPollGap (Note [Caller-run cycles],
  // engine.h); when it last did.
  bool caller_spaces_gpu_polls_ = false;
  std::chrono::steady_clock::time_point caller_gpu_poll_{};
  std::atomic<bool> drive_requested_{false};
  std::atomic<int64_t> last_drive_ns_{0};  // steady clock; 0: no recent driver
  std::mutex park_mu_;
  std::condition_variable park_cv_;

  std::once_flag shutdown_once_;
  std::thread thread_;
};

}  // namespace perseus::engine
