// Finishing posted collectives (Note [Posted collectives]) once every rank posted: complete
// them, or queue them for negotiation when they fall back. The cycle's entries complete in
// cycle_finish.cc.
#include "common/logging.h"
#include "engine/engine.h"

namespace perseus::engine {
namespace {

using Clock = std::chrono::steady_clock;

// Note [Posted collectives]: how often the engine thread finishes posts that nobody waits for
// and no callback needs. A sweep scans every pending post: done on each turn of the engine
// loop, it took the core from the framework thread that was submitting them.
constexpr std::chrono::microseconds kPostedSweep{1000};

}  // namespace

void Engine::settle(PostedCollectives::Settled& s) {
  if (s.renegotiate) {
    enqueue(std::move(s.renegotiate), true);
    return;
  }
  s.handle->complete(StatusCode::kOk, "");
}

void Engine::settlePosted(std::vector<PostedCollectives::Settled>& settled) {
  for (PostedCollectives::Settled& s : settled) settle(s);
  settled.clear();
}

void Engine::sweepPosted() {
  if (!posted_.hasPending()) return;
  const auto now = Clock::now();
  if (!posted_.listeningWanted() && now < next_posted_sweep_) return;
  next_posted_sweep_ = now + kPostedSweep;
  progressPosted();
}

void Engine::progressPosted() {
  if (!posted_.hasPending()) return;
  std::vector<PostedCollectives::Settled> settled;
  posted_.progressAll(&settled);
  settlePosted(settled);
}

void Engine::progressPosted(Handle& h) {
  PostedCollectives::Settled one;
  if (posted_.progress(h, &one)) settle(one);
}

}  // namespace perseus::engine
