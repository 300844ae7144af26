// The engine: one per process (the C API's default instance) or one per rank thread in tests.
// Framework threads submit requests; one engine thread negotiates them with the other ranks
// in cycles and runs the collectives in the negotiated order.
//
// Note [Engine cycle]
//  - The engine thread runs a cycle when it has new local requests, when the transport has
//    incoming bytes (another rank started a cycle: every cycle starts with a message to the
//    peers), or when pending work is due for a stall check. Otherwise it spins for
//    PERSEUS_SPIN_US, then blocks in Transport::waitIncoming(). No fixed sleep anywhere.
//  - A cycle negotiates the global set first (every rank, every cycle): one AND-allreduce of
//    its control vector (control.h), which also says which other sets have work. Then, in
//    ascending group order, each flagged set that this rank belongs to negotiates the same
//    way. All ranks therefore run the same negotiations in the same order (no deadlock).
//  - A set's negotiation: cached requests are announced by their cache bit; uncached ones go
//    to set rank 0 (the coordinator, negotiation.h) only when some rank has any, and the
//    coordinator broadcasts the new responses. Responses run through fusion (fusion.h) and
//    the device's Executor.
//  - New requests of the other sets also travel with the global negotiation to global rank
//    0, whose SetConflictCheck fails a name that ranks submitted on different sets which wait
//    for each other (set_conflict.h), on every rank, with MismatchError.
//  - Failures: a collective or negotiation that throws PeerLostError, TimeoutError or
//    ShutDownError breaks the engine: every pending and later request fails at once with a
//    message naming the tensor, the op and the cause (which names the lost rank).
//
// Note [Caller-run cycles]
// A cycle is run by whoever holds the cycle lock: the engine thread, or a framework thread that
// waits for a handle (waitFor). Handing each operation to the engine thread and its result
// back costs two thread switches per rank, which is most of a small allreduce's time when the
// ranks' callers and engine threads share few cores (`perseusrun -np 2
// bench/engine_latency_bench` shows it). So a waiting caller asks for the
// cycle lock (drive_requested_), and the engine thread, between its own cycles, parks:
// it gives the lock up and sleeps in slices of kParkSlice, touching neither the transport nor
// any engine state. While callers drove within the last kDriveWindow it stays parked, and on
// each slice it takes the lock only to run a cycle that is due (a peer's cycle arriving while
// no caller here waits), then parks again; after the window it takes the lock back and
// listens as before. A caller drives only while its handle is pending and cycles make progress,
// at most PERSEUS_SPIN_US idle; then it falls back to a blocking wait and ends the window, so
// the engine thread listens again. Polling a pending handle ends the window too, and yields
// the core once: a busy poller would otherwise keep its core from the engine thread. A caller
// that orders its stream after a CUDA op (streamWait) drives until the op's GPU work is enqueued,
// not until the GPU finished it, and polls GPU completion at most once per kCallerGpuPollGap:
// asking the GPU about finished work costs a driver call (Note [GPU completion by stream])
// that such a caller has no use for itself. Once the process
// submitted a CUDA tensor, the GPU backend makes the process's device current on whichever thread
// runs the cycle, and a framework thread's current device must not change under it: so a caller
// drives only while it has that device current, and gets it back afterwards should a cycle have
// made another one current (GpuBackend::currentDevice/restoreDevice). A caller with another device
// current leaves the cycles to the engine thread (restoring its device could create a CUDA context
// it never had), and a caller that began driving before the first CUDA tensor came stops before
// running a cycle with it. A caller never drives from inside a completion callback of the cycle it
// runs.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include "backends/gpu_backend.h"
#include "common/params.h"
#include "engine/call.h"
#include "engine/cycle/cycle.h"
#include "engine/cycle/process_set.h"
#include "engine/driver.h"
#include "engine/entry.h"
#include "engine/exec/executor.h"
#include "engine/exec/gpu_completion.h"
#include "engine/fast_path.h"
#include "engine/handle.h"
#include "engine/set_directory.h"
#include "engine/stall_report.h"
#include "engine/submissions.h"
#include "engine/timeline.h"
#include "rendezvous/world.h"
#include "transport/shm/shm_arena.h"
#include "transport/transport.h"

namespace perseus::engine {

class Engine {
 public:
  static constexpr int32_t kGlobalSet = kGlobalSetId;
  static constexpr int32_t kLocalSet = kLocalSetId;
  static constexpr int32_t kCrossSet = kCrossSetId;

  // `transport` and `arena` (may be null) outlive the engine; the engine thread is the only
  // thread that drives them from construction until shutdown() returns.
  Engine(const rendezvous::Topology& topology, transport::Transport* transport,
         transport::ShmArena* arena, const Params& params);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // --- submission: any thread. Validation errors throw (InvalidArgumentError,
  // DuplicateNameError, UnsupportedError); once the engine is broken or shut down the
  // returned handle has already failed with that cause. The tensors are read in place
  // (call.h). `blocking`: returns once the collective completed and throws its error; the
  // handle is null when the post path finished it without one (Note [Posted collectives]).
  std::shared_ptr<Handle> allreduce(std::string_view name, Span<TensorView> in, Span<void*> out,
                                    ReduceOp op, double prescale = 1.0, double postscale = 1.0,
                                    int32_t set = kGlobalSet, bool blocking = false);
  // `out`: the caller's buffer per input (CPU; Note [Allgather into]), each the set's size times
  // its input, which every rank gives with the same rows; empty: the library allocates the
  // outputs in the handle.
  std::shared_ptr<Handle> allgather(std::string_view name, Span<TensorView> in,
                                    int32_t set = kGlobalSet, bool blocking = false,
                                    Span<void*> out = {});
  // A blocking allreduce or allgather of one CPU tensor of the global set in two steps, for a
  // caller that makes its output while the other ranks' posts are on their way: true when the
  // post path published the input, with *opened filled (an allgather's output shape in
  // *shape); the caller then calls finishOpened() exactly once. False when the post path did
  // not take the call: nothing was submitted, and the caller makes the call another way.
  bool openAllreduce(std::string_view name, const TensorView& in, ReduceOp op, double prescale,
                     double postscale, OpenedPost* opened);
  bool openAllgather(std::string_view name, const TensorView& in, std::vector<int64_t>* shape,
                     OpenedPost* opened);
  // Finishes an opened call into `out` (its shape as opened): null when done; else the handle to
  // wait for, not waited for, whose library-owned output holds an allgather's result.
  std::shared_ptr<Handle> finishOpened(const OpenedPost& opened, void* out);
  std::shared_ptr<Handle> broadcast(std::string_view name, const TensorView& in, void* out,
                                    int32_t root, int32_t set = kGlobalSet, bool blocking = false);
  std::shared_ptr<Handle> alltoall(std::string_view name, const TensorView& in,
                                   Span<int64_t> splits, int32_t set = kGlobalSet,
                                   bool blocking = false);
  // `out`: the caller's buffer per input, each its block of the rows (CPU; Note [Allgather
  // into]); empty: the library allocates the outputs in the handle.
  std::shared_ptr<Handle> reducescatter(std::string_view name, Span<TensorView> in, ReduceOp op,
                                        double prescale = 1.0, double postscale = 1.0,
                                        int32_t set = kGlobalSet, bool blocking = false,
                                        Span<void*> out = {});
  std::shared_ptr<Handle> barrier(int32_t set = kGlobalSet);
  // Horovod's join on the global set; the handle's intResult() is the last rank to join.
  // `device`: the CUDA ordinal for the zeros this rank contributes to CUDA collectives after it
  // joined (Note [Join on the GPU]); -1: the device this process already used, else
  // GpuBackend::defaultDevice(). Throws InvalidArgumentError if it names another device than
  // the one this process used.
  std::shared_ptr<Handle> join(int device = -1);
  // Collective over all ranks; the handle's intResult() is the new set's id.
  std::shared_ptr<Handle> addProcessSet(const std::vector<int>& ranks);
  std::shared_ptr<Handle> removeProcessSet(int32_t id);

  std::optional<ProcessSetInfo> processSet(int32_t id) const;  // any thread

  // Horovod's start_timeline/stop_timeline (any thread but a completion callback): opens
  // `path` (the per-rank name when the job has several ranks) in place of the running timeline,
  // or closes it; the file is complete when stopTimeline returns. mark_cycles: one CYCLE span
  // per cycle. Throws InvalidArgumentError if the path cannot be written.
  void startTimeline(const std::string& path, bool mark_cycles) {
    // Opened here so that a bad path throws to the caller; swapped in under the cycle lock.
    driver_.swapTimeline(
        std::make_unique<Timeline>(Timeline::pathForRank(path, topology_.rank, topology_.size),
                                   topology_.rank),
        mark_cycles);
  }
  void stopTimeline() { driver_.swapTimeline(nullptr, false); }  // closed outside the lock

  // Waits for `handle` (any thread, not from a completion callback of this engine), running
  // the engine's cycles on this thread while that makes progress (Note [Caller-run cycles]).
  // Returns false if `timeout_s` (< 0: none) passed first.
  bool waitFor(Handle& handle, double timeout_s, int64_t spin_us) {
    return driver_.waitFor(handle, timeout_s, spin_us);
  }
  // Handle::streamWait (same threads as waitFor), running the engine's cycles on this thread
  // until the handle's GPU work is enqueued (Note [Caller-run cycles]).
  void streamWait(Handle& handle, void* stream, int64_t spin_us) {
    driver_.streamWait(handle, stream, spin_us);
  }
  // Whether `handle` is done (any thread, never blocks). A handle that is polled rather than
  // waited for is the engine thread's to finish: a parked engine thread listens again.
  bool poll(Handle& handle) { return driver_.poll(handle); }

  // Attaches `cb` to `handle` (Handle::setCallback). A pending post has no waiter to finish
  // it, so the engine thread listens for it from now on (FastPath::listenFor).
  void setCallback(Handle& handle, Handle::Callback cb) {
    driver_.setCallback(handle, std::move(cb));
  }

  // Stops the job's engines together: this rank's next cycle tells every rank, and each fails
  // its pending requests with ShutDownError and stops. Returns when this engine thread ended.
  // Idempotent.
  void shutdown() { driver_.shutdown(); }
  bool running() const { return !cycle_.stopped(); }

  const rendezvous::Topology& topology() const { return topology_; }
  // True when CUDA tensors can be submitted (a CUDA build; the device is checked at use).
  bool gpuEnabled() const { return gpu_ != nullptr; }
  const Params& params() const { return params_; }
  // The last stall warning this rank logged (empty if none): for tests and diagnostics.
  std::string lastStallWarning() const { return directory_.lastStallWarning(); }
  // The last early stall diagnosis this rank logged (PERSEUS_STALL_DIAGNOSIS; empty if none).
  std::string lastStallDiagnosis() const { return stall_report_.lastReport(); }
  // Where this rank's Python code waits for the collective `name` (any thread): the stall
  // diagnosis names it.
  void noteCallSite(const std::string& name, std::string site) {
    stall_report_.noteCallSite(name, std::move(site));
  }
  uint64_t cycles() const { return cycle_.stats().cycles; }
  // Counters for perseus_get_engine_stats (any thread; each value is read atomically): the
  // cycle's and the posts'.
  struct Stats : Cycle::Stats {
    uint64_t posted_allreduces = 0, posted_collectives = 0;
  };
  Stats stats() const;

 private:
  // The one submission path: offers the call to the post lane (FastPath::tryPost, the only
  // place that decides whether a call is posted), else queues it for negotiation; waits when
  // it blocks. Any thread.
  std::shared_ptr<Handle> submit(const Call& call);
  // submit() without its wait for a blocking call.
  std::shared_ptr<Handle> post(const Call& call);
  // The error of a call that the post lane refused: kClosed (the engine stopped) or kInFlight.
  [[noreturn]] void refused(OpType op, std::string_view name, FastPath::PostResult why) const;
  // The call with Call::opened offered to the post lane (openAllreduce(), openAllgather()).
  bool open(const Call& call);
  // The negotiated path: validates `e` and queues it, or fails its handle if the engine stopped.
  std::shared_ptr<Handle> queue(std::unique_ptr<Entry> e);
  // The lane's `requeue`: a post that falls back, whose name is not claimed in submissions_
  // yet, is queued for negotiation, or fails if the engine stopped. Any thread.
  void requeue(std::unique_ptr<Entry> e);
  // After a queueing: the engine thread hears of it if it blocks (Dekker with idleWait()).
  void wakeEngine() { driver_.wakeIfBlocked(); }
  DuplicateNameError duplicateName(OpType op, const std::string& name, int32_t set) const;

  // The parts' wiring (construction only).
  Cycle::Parts cycleParts();
  Cycle::Listener cycleListener();
  Driver::Parts driverParts();
  void prepareDevice(Entry& e);
  // The CUDA device of a joined rank's zeros (join()'s `device`). Engine thread.
  int joinedDevice();

  // The parts, in construction order (each may use those above it); every part's header says
  // which threads may call it and what it owns.
  const rendezvous::Topology topology_;
  transport::Transport* const transport_;
  transport::ShmArena* const arena_;
  const Params params_;
  // Null in a build without CUDA. Declared before the GPU pending list and the cycle's GPU
  // executor: works and executor die first.
  std::unique_ptr<backends::GpuBackend> gpu_;
  std::atomic<int> gpu_device_{-1};   // the one CUDA ordinal this process uses
  std::atomic<int> join_device_{-1};  // join()'s device, -1: none given
  // The post lane behind its door (fast_path.h); thread-safe on its own.
  const std::unique_ptr<FastPath> fast_path_;

  Submissions submissions_;  // the queue, the in-flight names, the stop cause; any thread

  // What submissions validate against (the cycle publishes its set changes there through
  // Cycle::Listener) and the counters that name unnamed calls; any thread.
  SetDirectory directory_;
  StallReport stall_report_;  // the early stall lines and the call sites they name; any thread

  GpuCompletion gpu_completion_;  // CUDA handles whose work is enqueued; holder of the cycle lock
  Cycle cycle_;                   // negotiate, fuse, execute; holder of the cycle lock
  Driver driver_;                 // the engine thread and the cycle lock; any thread
};

}  // namespace perseus::engine
