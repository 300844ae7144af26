// The C API's process-wide state: the default World and Engine (the only global engine, at
// the edge as STYLE.md asks), the handle table, and the thread-local last error.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "engine/engine.h"
#include "engine/handle.h"
#include "perseus/c_api.h"
#include "rendezvous/world.h"

namespace perseus::capi {

struct Runtime {
  std::mutex mu;  // guards world/engine replacement (init, shutdown)
  std::unique_ptr<rendezvous::World> world;
  std::shared_ptr<engine::Engine> engine;
  bool shut_down = false;
  engine::HandleTable handles;
  std::atomic<int64_t> spin_us{100};  // PERSEUS_SPIN_US of the running engine, for waits
};

Runtime& runtime();

// The running engine; throws NotInitializedError or ShutDownError with what to do.
std::shared_ptr<engine::Engine> requireEngine();

void setLastError(const std::string& message);

// Runs `body`, turning exceptions into a status and the thread's last error.
template <typename F>
perseus_status guarded(F&& body) {
  try {
    body();
    return PERSEUS_OK;
  } catch (const Error& e) {
    setLastError(e.what());
    return static_cast<perseus_status>(e.code());
  } catch (const std::exception& e) {
    setLastError(std::string("Perseus internal error: ") + e.what());
    return PERSEUS_ERR_INTERNAL;
  }
}

// Orders `stream` after the handle's GPU work (a CPU op: waits for it on the host). Until the
// engine has enqueued that work, `engine` (null: none is running) may run its cycles on this
// thread (Note [Caller-run cycles]).
void streamWait(engine::Engine* engine, engine::Handle& handle, void* stream);

// Registers the handle for C callers and returns its id.
perseus_handle publish(const std::shared_ptr<engine::Handle>& handle);
std::shared_ptr<engine::Handle> findHandle(perseus_handle id);  // throws InvalidArgumentError

}  // namespace perseus::capi
