// Completion of CUDA collectives (Note [GPU completion], gpu_executor.cc): the handles whose GPU
// work is enqueued but not done, polled on every turn of the engine loop.
//
// Contract: only the holder of the cycle lock (the engine thread, or a caller running a cycle)
// calls it; it owns the pending list and completes the handles in it. Handles are read by any
// thread (handle.h).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backends/gpu_backend.h"
#include "common/status.h"
#include "engine/handle.h"
#include "engine/timeline.h"

namespace perseus::engine {

class GpuCompletion {
 public:
  using Clock = std::chrono::steady_clock;
  // The longest the engine thread sleeps between polls while GPU work is pending: a finished
  // kernel's handle completes no later than this after the GPU finished it.
  static constexpr std::chrono::microseconds kPollInterval{50};
  // Called by poll() with a failure that must stop the engine, and what was running.
  using BreakEngine = std::function<void(const Error& cause, const std::string& during)>;

  // Keeps `handle` until the work it published (Handle::setGpuWork()) is done. `code`/`message`:
  // the entry's own error, if any (reported once the work is done). `launched`: for the
  // timeline's COMMUNICATE span (unset: none).
  void add(std::shared_ptr<Handle> handle, StatusCode code, std::string message,
           Clock::time_point launched);

  // Completes every handle whose work finished, or failed on its own (a local CUDA error:
  // that handle only), in the order they were added. A lost peer, a timeout or a shutdown that
  // the backend reports calls `break_engine` and returns at once: stopping fails the rest
  // (failAll). Asks each stream about its works newest first (Note [GPU completion by
  // stream], gpu_completion.cc).
  void poll(Timeline* timeline, const BreakEngine& break_engine);

  // Fails every pending handle with `message` (the engine stopped).
  void failAll(StatusCode code, const std::string& message);

  bool empty() const { return pending_.empty(); }

 private:
  struct Pending {
    std::shared_ptr<Handle> handle;  // with its published GPU work
    StatusCode code = StatusCode::kOk;
    std::string message;
    Clock::time_point launched;
    bool done = false;  // this poll's finding
  };
  // The latest record found done on a stream during one poll.
  struct StreamDone {
    const void* stream;
    uint64_t order;
  };
  bool workDone(backends::GpuWork& work);
  // Which pending works are done: false when `break_engine` was called.
  bool findDone(const BreakEngine& break_engine);

  std::vector<Pending> pending_;
  std::vector<Pending> finished_;         // one poll's; kept for its capacity
  std::vector<StreamDone> streams_done_;  // ditto
};

}  // namespace perseus::engine
