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
// A cycle is run by whoever holds cycle_mu_: the engine thread, or a framework thread that
// waits for a handle (waitFor). Handing each operation to the engine thread and its result
// back costs two thread switches per rank; on 2 cores shared by 2 ranks' callers and engine
// threads, that was ~5 of the 5.8 µs of a 4-byte allreduce. So a waiting caller asks for the
// cycle lock (drive_requested_), and the engine thread, between its own cycles, parks:
// it gives the lock up and sleeps in slices of kParkSlice, touching neither the transport nor
// any engine state. While callers drove within the last kDriveWindow it stays parked, and on
// each slice it takes the lock only to run a cycle that is due (a peer's cycle arriving while
// no caller here waits), then parks again; after the window it takes the lock back and
// listens as before. A caller drives only while its handle is pending and cycles make progress,
// at most PERSEUS_SPIN_US idle; then it falls back to a blocking wait and ends the window, so
// the engine thread listens again. Polling a pending handle ends the window too, and yields
// the core once: a busy poller would otherwise keep its core from the engine thread. Once the
// process submitted a CUDA tensor, every cycle stays on the engine thread (the GPU backend sets the
// calling thread's CUDA device, which must not change under a framework thread): a driver that
// drains one stops before running a cycle. A caller never drives from inside a completion callback
// of the cycle it runs.
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
#include "engine/entry.h"
#include "engine/executor.h"
#include "engine/gpu_completion.h"
#include "engine/handle.h"
#include "engine/posted_collectives.h"
#include "engine/process_set.h"
#include "engine/set_conflict.h"
#include "engine/submissions.h"
#include "engine/timeline.h"
#include "rendezvous/world.h"
#include "transport/shm/shm_arena.h"
#include "transport/transport.h"

namespace perseus::engine {

struct ProcessSetInfo {
  int32_t id = 0;
  std::vector<int> members;  // global ranks
  int rank = -1;             // this rank's set rank, -1 when not a member
};

class Engine {
 public:
  static constexpr int32_t kGlobalSet = 0;
  static constexpr int32_t kLocalSet = -1;
  static constexpr int32_t kCrossSet = -2;

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
  std::shared_ptr<Handle> allgather(std::string_view name, Span<TensorView> in,
                                    int32_t set = kGlobalSet, bool blocking = false);
  std::shared_ptr<Handle> broadcast(std::string_view name, const TensorView& in, void* out,
                                    int32_t root, int32_t set = kGlobalSet, bool blocking = false);
  std::shared_ptr<Handle> alltoall(std::string_view name, const TensorView& in,
                                   Span<int64_t> splits, int32_t set = kGlobalSet,
                                   bool blocking = false);
  std::shared_ptr<Handle> reducescatter(std::string_view name, Span<TensorView> in, ReduceOp op,
                                        double prescale = 1.0, double postscale = 1.0,
                                        int32_t set = kGlobalSet, bool blocking = false);
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
  void startTimeline(const std::string& path, bool mark_cycles);
  void stopTimeline();

  // Waits for `handle` (any thread, not from a completion callback of this engine), running
  // the engine's cycles on this thread while that makes progress (Note [Caller-run cycles]).
  // Returns false if `timeout_s` (< 0: none) passed first.
  bool waitFor(Handle& handle, double timeout_s, int64_t spin_us);
  // Whether `handle` is done (any thread, never blocks). A handle that is polled rather than
  // waited for is the engine thread's to finish: a parked engine thread listens again.
  bool poll(Handle& handle);

  // Attaches `cb` to `handle` (Handle::setCallback). A pending post has no waiter to finish
  // it, so the engine thread listens for it from now on (Note [Posted collectives]).
  void setCallback(Handle& handle, Handle::Callback cb);

  // Stops the job's engines together: this rank's next cycle tells every rank, and each fails
  // its pending requests with ShutDownError and stops. Returns when this engine thread ended.
  // Idempotent.
  void shutdown();
  bool running() const { return !stopped_.load(); }

  const rendezvous::Topology& topology() const { return topology_; }
  // True when CUDA tensors can be submitted (a CUDA build; the device is checked at use).
  bool gpuEnabled() const { return gpu_ != nullptr; }
  const Params& params() const { return params_; }
  // The last stall warning this rank logged (empty if none): for tests and diagnostics.
  std::string lastStallWarning() const;
  uint64_t cycles() const { return cycles_.load(); }
  // Counters for perseus_get_engine_stats (any thread; each value is read atomically).
  struct Stats {
    uint64_t cycles = 0, control_exchanges = 0, control_bytes = 0, coordinator_rounds = 0,
             cached_responses = 0, coordinated_responses = 0, negotiation_ns = 0,
             posted_allreduces = 0, posted_collectives = 0;
  };
  Stats stats() const;

 private:
  // The one submission path: offers the call to the post path (PostedCollectives::tryPost,
  // the only place that decides whether a call is posted), else queues it for negotiation;
  // waits when it blocks. Any thread.
  std::shared_ptr<Handle> submit(const Call& call);
  // The negotiated path: validates `e` and queues it, or fails its handle if the engine stopped.
  std::shared_ptr<Handle> queue(std::unique_ptr<Entry> e);
  // Note [Posted collectives]: finishes settled posts (completes them or queues them for
  // negotiation). Any thread.
  void settlePosted(std::vector<PostedCollectives::Settled>& settled);
  void settle(PostedCollectives::Settled& settled);
  void progressPosted();  // every pending post
  // progressPosted() when the engine thread must finish posts now (listeningWanted()) or once
  // per kPostedSweep otherwise. Holder of the cycle lock.
  void sweepPosted();
  void progressPosted(Handle& h);  // h's post only
  // Queues `e` for negotiation, or fails it if the engine stopped. `from_post`: a post that
  // falls back, whose name is not claimed in submissions_ yet. Any thread.
  void enqueue(std::unique_ptr<Entry> e, bool from_post);
  // After a queueing: the engine thread hears of it if it blocks (Dekker with idleWait()).
  void wakeEngine() {
    if (engine_blocked_.load()) transport_->wake();
  }
  DuplicateNameError duplicateName(OpType op, const std::string& name, int32_t set) const;
  void validateSet(Entry& entry) const;  // caller holds mu_

  // The holder of cycle_mu_ (the engine thread, or a caller in waitFor).
  void loop();
  // One turn: runs a cycle if one is due and returns whether it did; *pending: work is left.
  bool step(bool* pending);
  // Engine thread without the lock: sleeps one kParkSlice or until a driver leaves.
  void park();
  // Runs fn holding cycle_mu_, asking the engine thread to give it up between its cycles.
  void withCycleLock(const std::function<void()>& fn);
  bool drivenRecently() const;
  // waitFor()'s driving part: returns when the handle is done, or the cycles stalled for
  // spin_us, or the lock could not be had.
  void drive(const Handle& handle, int64_t spin_us);
  bool drainQueue();
  // `spin`: spin PERSEUS_SPIN_US before blocking; false when the last wait ended with nothing
  // to do (a timeout: work wakes the thread, so spinning again would only take a core).
  void idleWait(bool pending, bool spin);
  bool runCycle();
  std::vector<Response> negotiate(ProcessSet& set, bool global);
  void classifyFresh(ProcessSet& set, std::chrono::steady_clock::time_point now,
                     std::vector<int>* invalid_bits);
  std::vector<Response> coordinate(ProcessSet& set, const std::vector<Request>& requests);
  void inspectStalls(ProcessSet& set, std::vector<Response>* responses);
  // Cross-set name check (set_conflict.h, cross_set.cc). announceNewRequests: this rank's
  // new uncached requests of the other sets, to send with the global negotiation.
  // checkCrossSet: global rank 0 feeds every rank's list to the check, keeps the requests of
  // `set` and appends the conflicts. failCrossSet: every rank fails and drops the names of the
  // cross-set responses in `responses` (removing them from it).
  std::vector<Request> announceNewRequests();
  std::vector<Request> checkCrossSet(ProcessSet& set, int set_rank, std::vector<Request> list);
  void failCrossSet(std::vector<Response>* responses);
  // The error of a newly drained request whose name the check failed before this rank
  // submitted it (conflicted_names_), consumed; nullopt when there is none.
  std::optional<std::string> takeConflict(const ProcessSet& set, const Request& q);
  // "<op> '<name>' in process set <id> on rank <r>: <cause>".
  std::string crossSetFailure(const Request& q, int32_t set_id, const std::string& cause) const;
  void execute(ProcessSet& set, std::vector<Response>& responses);
  void executeControl(ProcessSet& set, const Response& r, Entry* e);
  void addSet(const Response& r, Entry* e);
  void removeSet(const Response& r, Entry* e);
  void finish(ProcessSet& set, Entry* e, StatusCode code, const std::string& message);
  // Completes CPU entries (one fusion group's) with their own error or success: one lock of
  // mu_ for all their names, then each handle.
  void finishGroup(ProcessSet& set, Entry* const* done, size_t n);
  void finishGpu(ProcessSet& set, Entry* e);
  void pollGpu();
  void prepareDevice(Entry& e);
  // The CUDA device of a joined rank's zeros (join()'s `device`). Engine thread.
  int joinedDevice();
  void breakEngine(const Error& cause, const std::string& during);
  // `lost_rank`: the global rank whose loss stops the engine (kPeerLost), else -1.
  void stopAll(StatusCode code, const std::string& message, int lost_rank = -1);
  ProcessSet* setById(int32_t id);
  std::unique_ptr<collectives::Communicator> makeComm(const ProcessSet& set);

  const rendezvous::Topology topology_;
  transport::Transport* const transport_;
  transport::ShmArena* const arena_;
  const Params params_;
  std::unique_ptr<Executor> cpu_executor_;
  // Null in a build without CUDA. Declared before the pending list: works die first.
  std::unique_ptr<backends::GpuBackend> gpu_;
  std::unique_ptr<Executor> gpu_executor_;
  std::atomic<int> gpu_device_{-1};   // the one CUDA ordinal this process uses
  std::atomic<int> join_device_{-1};  // join()'s device, -1: none given
  std::unique_ptr<Timeline> timeline_;
  bool mark_cycles_ = false;  // holder of cycle_mu_
  // Note [Posted collectives]; thread-safe on its own.
  PostedCollectives posted_;
  std::atomic<int> posted_watchers_{0};  // callers watching a post in waitFor()
  std::chrono::steady_clock::time_point next_posted_sweep_{};  // holder of cycle_mu_

  Submissions submissions_;  // the queue, the in-flight names, the stop cause; any thread

  // Any thread, guarded by mu_.
  mutable std::mutex mu_;
  std::map<int32_t, ProcessSetInfo> set_info_;
  // Names of the collective calls without a user name: every rank counts its calls, and
  // ranks call them in the same order, so the n-th call has the same name everywhere.
  int add_set_calls_ = 0;
  int remove_set_calls_ = 0;
  std::map<int32_t, int> barrier_calls_;
  std::string last_stall_warning_;
  // True while the engine thread blocks in waitIncoming(): only then does submit() pay for
  // Transport::wake() (a futex/eventfd syscall). Both sides use seq_cst (Dekker): a submission
  // either sees the flag or is seen by the engine's re-check after setting it.
  std::atomic<bool> engine_blocked_{false};
  std::atomic<bool> shutdown_requested_{false};
  std::atomic<bool> stopped_{false};
  std::atomic<uint64_t> cycles_{0};
  // Written by the engine thread only (relaxed); read by stats().
  std::atomic<uint64_t> control_exchanges_{0}, control_bytes_{0}, coordinator_rounds_{0},
      cached_responses_{0}, coordinated_responses_{0}, negotiation_ns_{0};

  // Engine thread only.
  std::map<int, std::unique_ptr<ProcessSet>> sets_;  // by group id: the cycle order
  int32_t next_set_id_ = 1;
  // Group ids not used yet start at next_group_; once those ran out, a removed set's id is
  // handed to the next new set, after every rank agreed how to continue its history in the
  // arena (Note [Reused group ids] in collectives/collectives.h).
  int next_group_ = kFirstUserGroup;
  std::set<int> removed_groups_;
  bool more_work_ = false;
  bool set_work_[kMaxGroups] = {};                   // from the last global negotiation
  std::unique_ptr<SetConflictCheck> set_conflicts_;  // global rank 0, created on first use
  // Names failed by the cross-set check before this rank submitted them (a member of either
  // set): the next submission of the name fails with this message instead of waiting.
  std::map<std::string, std::string> conflicted_names_;
  std::chrono::steady_clock::time_point next_retry_{};
  GpuCompletion gpu_completion_;      // CUDA handles whose work is enqueued but not done
  std::vector<Entry*> done_scratch_;  // execute(): a group's finished CPU entries

  // Note [Caller-run cycles]: whoever holds cycle_mu_ owns everything marked "engine thread".
  std::mutex cycle_mu_;
  std::atomic<bool> drive_requested_{false};
  std::atomic<int64_t> last_drive_ns_{0};  // steady clock; 0: no recent driver
  std::mutex park_mu_;
  std::condition_variable park_cv_;

  std::mutex shutdown_mu_;
  std::thread thread_;
};

}  // namespace perseus::engine
