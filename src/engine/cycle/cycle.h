// The cycle (Note [Engine cycle] in engine.h): negotiate the process sets with work, fuse their
// responses into groups and run the groups on the device's executor, then complete the handles.
// One Cycle per engine; it runs on a Transport with the engine's Topology, Params and executors
// and needs no engine thread (engine_cycle_test runs it on in-process ranks directly).
//
// Contract: only the holder of the cycle lock calls it (the engine thread or a caller running a
// cycle; Driver takes the lock), except stopped() and stats(), which any thread reads. It owns
// the process sets (ProcessSetTable: their entries, caches, coordinators, fusion buffers), their
// negotiation (SetNegotiator, with the cross-set check, CrossSetNames), the executors and the
// timeline. It completes the handles of the entries it drained, and on a stop fails everything
// pending: the queue, the posts, the GPU work, its sets' entries. It locks no mutex of its own:
// the process-set table and the stall warning that other threads read are published through
// Listener, whose owner guards them.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backends/gpu_backend.h"
#include "common/params.h"
#include "engine/cycle/cross_set_names.h"
#include "engine/cycle/process_set.h"
#include "engine/cycle/set_negotiator.h"
#include "engine/cycle/set_table.h"
#include "engine/entry.h"
#include "engine/exec/executor.h"
#include "engine/exec/gpu_completion.h"
#include "engine/fast_path.h"
#include "engine/submissions.h"
#include "engine/timeline.h"
#include "rendezvous/world.h"
#include "transport/shm/shm_arena.h"
#include "transport/transport.h"

namespace perseus::engine {

class Cycle {
 public:
  // What the cycle works on. The pointers and references outlive the cycle; `arena` and `gpu`
  // may be null (no shared memory, a build without CUDA), as may `gpu_executor`.
  struct Parts {
    rendezvous::Topology topology;
    transport::Transport* transport = nullptr;
    transport::ShmArena* arena = nullptr;
    Params params;
    Submissions* submissions = nullptr;       // drained each cycle; names released on completion
    FastPath* fast_path = nullptr;            // learns from the global set's responses
    GpuCompletion* gpu_completion = nullptr;  // CUDA entries once their work is enqueued
    backends::GpuBackend* gpu = nullptr;      // closed or aborted when the engine stops
    std::unique_ptr<Executor> cpu_executor;
    std::unique_ptr<Executor> gpu_executor;
  };
  // How other threads learn what the cycle changed (each may be empty). Called by the cycle
  // holder, and from the constructor for the three built-in sets.
  struct Listener {
    std::function<void(const ProcessSetInfo&)> set_added;
    std::function<void(int32_t id)> set_removed;
    std::function<void(const std::string&)> stall_warning;
    // Every rank: the coordinator's early stall notices (PERSEUS_STALL_DIAGNOSIS).
    std::function<void(const std::vector<StallNotice>&)> stall_notices;
  };
  // Counters for Engine::stats (written by the cycle holder, relaxed; any thread reads them).
  struct Stats : NegotiationStats {
    uint64_t cycles = 0;
  };

  // Creates the global, local and cross sets (and the timeline that params.timeline names).
  Cycle(Parts parts, Listener listener);
  Cycle(const Cycle&) = delete;
  Cycle& operator=(const Cycle&) = delete;

  // Moves the queued submissions into their sets; returns whether there were any. A name that
  // the cross-set check failed before, or a set removed since, fails its entry here.
  bool drain();
  // Whether some set has an entry to negotiate or one waiting for the other ranks.
  bool pending() const;
  // Whether the last cycle left work that needs another one at once (or markWork() said so).
  bool moreWork() const { return more_work_; }
  void markWork() { more_work_ = true; }
  // One cycle on every rank of the job (collective: all ranks call it in the same order).
  // `shutdown`: tell every rank to stop. Returns whether it made progress (some response ran);
  // a failure stops the engine (stopped()) and counts as progress.
  bool run(bool shutdown);
  // Completes the GPU entries whose work finished (GpuCompletion); a lost peer stops.
  void pollGpu();
  bool gpuPending() const { return !gpu_completion_.empty(); }

  // Fails everything pending with `code` and marks the engine stopped. `lost_rank`: the global
  // rank whose loss stops it (kPeerLost), else -1.
  void stopAll(StatusCode code, const std::string& message, int lost_rank = -1);
  bool stopped() const { return stopped_.load(); }

  // The timeline in place of the running one (null: none); returns the old one, which the
  // caller closes outside the cycle lock. mark_cycles: one CYCLE span per cycle.
  std::unique_ptr<Timeline> swapTimeline(std::unique_ptr<Timeline> timeline, bool mark_cycles);
  void flushTimeline() {
    if (timeline_) timeline_->flush();
  }

  Stats stats() const;

 private:
  bool runSets(bool shutdown);
  // Where a cycle is, for the error that stops the engine ("negotiation of process set 3").
  struct Phase {
    bool executing = false;
    int32_t set_id = kGlobalSetId;
    bool global = true;
    std::string describe() const;
  };
  // One negotiation of `set`, then its responses run (execute.cc). Returns whether some
  // response ran.
  bool negotiateAndRun(ProcessSet& set, bool shutdown, Phase* phase);
  void execute(ProcessSet& set, std::vector<Response>& responses);
  void executeControl(ProcessSet& set, const Response& r, Entry* e);
  void addSet(const Response& r, Entry* e);
  void removeSet(const Response& r, Entry* e);
  void finish(ProcessSet& set, Entry* e, StatusCode code, const std::string& message);
  // Completes CPU entries (one fusion group's) with their own error or success: one release
  // of their names, then each handle.
  void finishGroup(ProcessSet& set, Entry* const* done, size_t n);
  void finishGpu(ProcessSet& set, Entry* e);
  void breakEngine(const Error& cause, const std::string& during);
  // "Perseus was shut down: rank 1 on host b called shutdown() ..." for the pending operations.
  std::string shutdownMessage(const std::vector<int>& leaving) const;

  transport::ShmArena* const arena_;
  const int rank_;
  const std::vector<std::string> hostnames_;  // by rank: named when a rank shuts the job down
  const Params params_;
  Submissions& submissions_;
  FastPath& fast_path_;
  GpuCompletion& gpu_completion_;
  backends::GpuBackend* const gpu_;
  const std::unique_ptr<Executor> cpu_executor_;
  const std::unique_ptr<Executor> gpu_executor_;
  std::unique_ptr<Timeline> timeline_;
  bool mark_cycles_ = false;

  ProcessSetTable sets_;
  CrossSetNames cross_set_;
  SetNegotiator negotiator_;
  bool more_work_ = false;
  std::vector<Entry*> done_scratch_;             // execute(): a group's finished CPU entries
  std::vector<Entry*> entries_scratch_;          // execute(): storage for the responses' entries
  std::vector<std::unique_ptr<Entry>> drained_;  // drain(): the last batch's storage, empty

  std::atomic<bool> stopped_{false};
  std::atomic<uint64_t> cycles_{0};
};

}  // namespace perseus::engine
