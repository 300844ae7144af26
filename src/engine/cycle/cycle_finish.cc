// Completing the cycle's entries: a negotiated group's CPU entries, CUDA entries handed to
// GpuCompletion once their work is enqueued; and failing everything pending when the engine
// stops. Holder of the cycle lock only (cycle.h).
#include "common/logging.h"
#include "engine/cycle/cycle.h"

namespace perseus::engine {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

void Cycle::finish(ProcessSet& set, Entry* e, StatusCode code, const std::string& message) {
  e->error = code;
  e->error_message = message;
  Entry* one[] = {e};
  finishGroup(set, one, 1);
}

void Cycle::finishGroup(ProcessSet& set, Entry* const* done, size_t n) {
  if (n == 0) return;
  submissions_.release(set.id, done, n);
  for (size_t i = 0; i < n; ++i) {
    // Keep the entry (and the name the handle's message may read) alive until its handle
    // completed.
    std::unique_ptr<Entry> owned = set.take(done[i]->request.name);
    done[i]->handle->complete(done[i]->error, done[i]->error_message);
  }
}

void Cycle::finishGpu(ProcessSet& set, Entry* e) {
  submissions_.release(set.id, e->request.name);
  std::unique_ptr<Entry> owned = set.take(e->request.name);
  e->handle->setGpuWork(std::move(e->gpu_works));
  gpu_completion_.add(e->handle, e->error, e->error_message,
                      timeline_ ? Clock::now() : Clock::time_point{});
}

void Cycle::pollGpu() {
  gpu_completion_.poll(timeline_.get(), [this](const Error& cause, const std::string& during) {
    breakEngine(cause, during);
  });
}

void Cycle::stopAll(StatusCode code, const std::string& message, int lost_rank) {
  std::vector<std::unique_ptr<Entry>> queued = submissions_.stop(code, message);
  auto describe = [&](const Entry& e) {
    return PERSEUS_STR(opTypeName(e.request.op)
                       << " '" << e.request.name << "' failed: " << message);
  };
  for (auto& e : queued) e->handle->complete(code, describe(*e));
  for (auto& [kind, h] : fast_path_.close()) {
    h->complete(code,
                PERSEUS_STR(opTypeName(kind) << " '" << h->name() << "' failed: " << message));
  }
  if (gpu_) {
    // Fails the backend's pending work and aborts its communicators, so no NCCL call waits
    // for a peer that will never come.
    std::exception_ptr reason;
    if (code == StatusCode::kPeerLost) {
      reason = std::make_exception_ptr(PeerLostError(lost_rank, message));
    } else if (code == StatusCode::kTimeout) {
      reason = std::make_exception_ptr(TimeoutError(message));
    } else {
      reason = std::make_exception_ptr(ShutDownError(message));
    }
    // A clean shutdown destroys the communicators, which needs no warning; anything else
    // aborts them.
    if (code == StatusCode::kShutDown) {
      gpu_->close(reason);
    } else {
      gpu_->abort(reason);
    }
  }
  gpu_completion_.failAll(code, message);
  for (auto& [group, set] : sets_) {
    for (auto& [name, e] : set->entries) e->handle->complete(code, describe(*e));
    set->entries.clear();
    set->fresh.clear();
    set->uncached.clear();
  }
  stopped_.store(true);
}

void Cycle::breakEngine(const Error& cause, const std::string& during) {
  PERSEUS_LOG(ERROR, kEngine) << "engine stopped during " << during << ": " << cause.what();
  int lost_rank = -1;
  if (cause.code() == StatusCode::kPeerLost) {
    lost_rank = static_cast<const PeerLostError&>(cause).rank();
    // Local peers that see this rank go next then name the rank that was lost first.
    if (arena_ != nullptr) arena_->recordLostPeer(lost_rank, cause.what());
  }
  stopAll(cause.code(), PERSEUS_STR(cause.what() << " (during " << during << ")"), lost_rank);
}

}  // namespace perseus::engine
