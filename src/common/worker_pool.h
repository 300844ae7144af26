// A process-wide pool of worker threads for fork-join loops over memory (the shared-memory
// allreduce splits each pipeline phase among them, Note [Reduce threads] in
// collectives/allreduce_shm.cc).
//
// Note [Worker pool]
// Threads are created lazily, the first time a call needs them, and then kept: a steady-state
// run() allocates nothing. Each worker has its own job word; the caller writes the job and
// bumps the word, so a worker never sees another worker's job. An idle worker polls its word
// for kWorkerSpinUs, then sleeps on it (futex); the caller wakes only workers that sleep. The
// caller runs part 0 itself and then polls (then sleeps on) a countdown of the other parts.
//
// Callers take turns (a mutex held for one run()). That cannot deadlock ranks that run as
// threads of one process and meet at barriers between run() calls: a run() waits only for its
// own parts, which wait for nothing.
//
// fork(): the child has none of the parent's threads, so a pthread_atfork handler gives the
// child a fresh, empty pool (the parent's state is abandoned, not freed: its mutex may be held
// by a thread that does not exist in the child).
//
// Shutdown: shutdown() (engine shutdown) and the destructor (library unload / exit) join the
// workers; a later run() starts them again.
#pragma once

#include <cstdint>

namespace perseus {

class WorkerPool {
 public:
  // The process's pool.
  static WorkerPool& instance();

  // Runs body(part) for every part in [0, parts) and returns when all have returned. The
  // calling thread runs part 0; workers run the others concurrently, so body must be safe to
  // call for different parts at once. If parts throw, the first exception is rethrown here,
  // after every part has finished. `spin_us`: how long the caller polls for the other parts
  // before it sleeps. Any thread may call.
  template <typename Body>
  void run(int parts, Body& body, int64_t spin_us) {
    if (parts <= 1) {
      if (parts == 1) body(0);
      return;
    }
    runParts(
        parts, [](void* ctx, int part) { (*static_cast<Body*>(ctx))(part); }, &body, spin_us);
  }

  // Joins the workers (waits for a run() in progress to finish first).
  void shutdown();
  // Worker threads alive now (for tests and logs).
  int workers();

  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // The largest number of parts one run() spreads over threads; more parts run on the caller.
  static constexpr int kMaxThreads = 64;

  struct State;  // worker_pool.cc

 private:
  WorkerPool();
  using PartFn = void (*)(void* ctx, int part);
  void runParts(int parts, PartFn fn, void* ctx, int64_t spin_us);
  static void afterForkInChild();

  State* state_;
};

}  // namespace perseus
