#include "engine/exec/gpu_completion.h"

#include "common/logging.h"

namespace perseus::engine {

void GpuCompletion::add(std::shared_ptr<Handle> handle,
                        std::vector<std::shared_ptr<backends::GpuWork>> works, StatusCode code,
                        std::string message, Clock::time_point launched) {
  pending_.push_back({std::move(handle), std::move(works), code, std::move(message), launched});
}

void GpuCompletion::poll(Timeline* timeline, const BreakEngine& break_engine) {
  for (size_t i = 0; i < pending_.size();) {
    Pending& p = pending_[i];
    bool done = true;
    try {
      for (auto& w : p.works) done = w->poll() && done;
    } catch (const Error& err) {
      // The backend aborted its communicators: a lost peer or a timeout breaks the engine as
      // on the CPU path; anything else fails this handle only.
      if (err.code() == StatusCode::kPeerLost || err.code() == StatusCode::kTimeout ||
          err.code() == StatusCode::kShutDown) {
        break_engine(err, PERSEUS_STR("GPU collective '" << p.handle->name() << "'"));
        return;
      }
      p.code = err.code();
      p.message = PERSEUS_STR("'" << p.handle->name() << "': " << err.what());
    }
    if (!done && p.code == StatusCode::kOk) {
      ++i;
      continue;
    }
    // launched is unset for work started before startTimeline().
    if (timeline && p.launched != Clock::time_point{}) {
      timeline->span(p.handle->name(), "COMMUNICATE", p.launched, Clock::now());
    }
    auto handle = std::move(p.handle);
    StatusCode code = p.code;
    std::string message = std::move(p.message);
    pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
    handle->complete(code, message);
  }
}

void GpuCompletion::failAll(StatusCode code, const std::string& message) {
  std::vector<Pending> failed;
  failed.swap(pending_);
  for (auto& p : failed) {
    p.handle->complete(code, PERSEUS_STR("'" << p.handle->name() << "' failed: " << message));
  }
}

}  // namespace perseus::engine
