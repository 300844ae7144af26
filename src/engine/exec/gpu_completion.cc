#include "engine/exec/gpu_completion.h"

#include "common/logging.h"

namespace perseus::engine {

void GpuCompletion::add(std::shared_ptr<Handle> handle, StatusCode code, std::string message,
                        Clock::time_point launched) {
  pending_.push_back({std::move(handle), code, std::move(message), launched});
}

// Note [GPU completion by stream]
// A stream runs what is enqueued on it in order, so an event recorded on it completes after
// every event recorded on it before. poll() so looks at the pending works newest first and,
// once a work is done, takes every work recorded earlier on its stream for done without
// asking the GPU: cudaEventQuery takes the driver's locks and cost about as much as a whole
// small collective's submission. A loop of small CUDA collectives (one stream, a work each)
// then costs a poll one query, not one per op. A work that no one stream orders
// (GpuWork::completionStream) is asked itself. A work still running is asked too: that is
// where the backend finds a lost peer or the timeout.

bool GpuCompletion::workDone(backends::GpuWork& work) {
  const void* stream = nullptr;
  uint64_t order = 0;
  if (!work.completionStream(&stream, &order)) return work.poll();
  for (const StreamDone& s : streams_done_) {
    if (s.stream == stream && s.order >= order) return true;
  }
  if (!work.poll()) return false;
  streams_done_.push_back({stream, order});
  return true;
}

bool GpuCompletion::findDone(const BreakEngine& break_engine) {
  streams_done_.clear();
  for (size_t i = pending_.size(); i-- > 0;) {
    Pending& p = pending_[i];
    p.done = true;
    try {
      for (auto& w : p.handle->gpuWorks()) p.done = workDone(*w) && p.done;
    } catch (const Error& err) {
      // The backend aborted its communicators: a lost peer or a timeout breaks the engine as
      // on the CPU path; anything else fails this handle only.
      if (err.code() == StatusCode::kPeerLost || err.code() == StatusCode::kTimeout ||
          err.code() == StatusCode::kShutDown) {
        break_engine(err, PERSEUS_STR("GPU collective '" << p.handle->name() << "'"));
        return false;
      }
      p.code = err.code();
      p.message = PERSEUS_STR("'" << p.handle->name() << "': " << err.what());
    }
  }
  return true;
}

void GpuCompletion::poll(Timeline* timeline, const BreakEngine& break_engine) {
  if (!findDone(break_engine)) return;
  // The finished leave the list before their handles complete, in the order they came.
  size_t kept = 0;
  for (Pending& p : pending_) {
    if (p.done || p.code != StatusCode::kOk) {
      finished_.push_back(std::move(p));
    } else {
      if (&pending_[kept] != &p) pending_[kept] = std::move(p);
      ++kept;
    }
  }
  pending_.resize(kept);
  for (Pending& p : finished_) {
    // launched is unset for work started before startTimeline().
    if (timeline && p.launched != Clock::time_point{}) {
      timeline->span(p.handle->name(), "COMMUNICATE", p.launched, Clock::now());
    }
    p.handle->complete(p.code, p.message);
  }
  finished_.clear();
}

void GpuCompletion::failAll(StatusCode code, const std::string& message) {
  std::vector<Pending> failed;
  failed.swap(pending_);
  for (auto& p : failed) {
    p.handle->complete(code, PERSEUS_STR("'" << p.handle->name() << "' failed: " << message));
  }
}

}  // namespace perseus::engine
