#include "common/worker_pool.h"

#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <exception>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace perseus {
namespace {

using Clock = std::chrono::steady_clock;

// An idle worker polls this long before it sleeps: long enough to bridge the barrier between
// two phases of one collective, short enough not to burn a core between collectives.
constexpr int64_t kWorkerSpinUs = 10;
// Sleeps are bounded so that a lost wake-up (a bug) costs a millisecond, not a hang.
constexpr long kSleepNs = 1000 * 1000;

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

// Process-private futex: the words live in this process's heap.
void futexWait(std::atomic<uint32_t>* word, uint32_t expected) {
  struct timespec ts = {0, kSleepNs};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected, &ts, nullptr,
          0);
}

void futexWake(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr,
          nullptr, 0);
}

// Polls `done()` for about `spin_us`, then sleeps on `word` (flagging it in `sleeping` so the
// other side knows to wake it) until done() holds. The flag and the word are seq_cst on both
// sides: either the waiter sees the change, or the changer sees the flag (and FUTEX_WAIT
// itself refuses to sleep if the word already moved).
// After the first ~kPureSpinIters polls each one yields the core: when threads outnumber cores
// (forced PERSEUS_REDUCE_THREADS, or ranks pinned to one core each) the thread waited for may
// be runnable on this very core, and a pure spin would hold it off for the whole spin time.
// With a core to itself, sched_yield() returns at once and only slows the poll a little.
template <typename Done>
void await(std::atomic<uint32_t>* word, std::atomic<uint32_t>* sleeping, int64_t spin_us,
           Done done) {
  constexpr int kPureSpinIters = 256;  // ~2-10 µs of pause instructions
  const auto deadline = Clock::now() + std::chrono::microseconds(spin_us);
  for (int i = 1; !done(); ++i) {
    if (i < kPureSpinIters) {
      cpuRelax();
    } else {
      sched_yield();
    }
    if (i % 64 != 0 || Clock::now() < deadline) continue;
    while (true) {
      const uint32_t seen = word->load(std::memory_order_seq_cst);
      if (done()) return;
      sleeping->store(1, std::memory_order_seq_cst);
      if (!done()) futexWait(word, seen);
      sleeping->store(0, std::memory_order_relaxed);
      if (done()) return;
    }
  }
}

}  // namespace

// One worker. The caller writes fn/ctx/part, then bumps `job` (release); the worker reads them
// after seeing the bump (acquire) and before it counts itself done, and the caller writes the
// next job only after the countdown reached zero: the fields are never raced.
struct alignas(64) Worker {
  std::atomic<uint32_t> job{0};
  std::atomic<uint32_t> sleeping{0};
  WorkerPool::State* state = nullptr;
  void (*fn)(void*, int) = nullptr;  // nullptr: exit
  void* ctx = nullptr;
  int part = 0;
  std::thread thread;
};

struct WorkerPool::State {
  std::mutex mutex;  // one run()/shutdown() at a time
  std::vector<std::unique_ptr<Worker>> workers;
  alignas(64) std::atomic<uint32_t> remaining{0};
  std::atomic<uint32_t> caller_sleeping{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;    // written by the part that set `failed` first
  State* abandoned = nullptr;  // the parent's state in a forked child (kept reachable)

  void fail() {
    if (!failed.exchange(true, std::memory_order_relaxed)) error = std::current_exception();
  }
  // A part finished: the last one wakes the caller if it sleeps.
  void partDone() {
    if (remaining.fetch_sub(1, std::memory_order_seq_cst) == 1 &&
        caller_sleeping.load(std::memory_order_seq_cst) != 0) {
      futexWake(&remaining);
    }
  }
};

namespace {

void workerLoop(Worker* w) {
  uint32_t seen = 0;
  while (true) {
    await(&w->job, &w->sleeping, kWorkerSpinUs,
          [&] { return w->job.load(std::memory_order_acquire) != seen; });
    seen = w->job.load(std::memory_order_acquire);
    if (w->fn == nullptr) return;
    try {
      w->fn(w->ctx, w->part);
    } catch (...) {
      w->state->fail();
    }
    w->state->partDone();
  }
}

// Hands `w` a job (fn == nullptr: exit).
void post(Worker* w, void (*fn)(void*, int), void* ctx, int part) {
  w->fn = fn;
  w->ctx = ctx;
  w->part = part;
  w->job.fetch_add(1, std::memory_order_seq_cst);
  if (w->sleeping.load(std::memory_order_seq_cst) != 0) futexWake(&w->job);
}

void joinAll(WorkerPool::State* s) {
  for (auto& w : s->workers) post(w.get(), nullptr, nullptr, 0);
  for (auto& w : s->workers) w->thread.join();
  s->workers.clear();
}

}  // namespace

WorkerPool::WorkerPool() : state_(new State) {
  pthread_atfork(nullptr, nullptr, &WorkerPool::afterForkInChild);
}

WorkerPool& WorkerPool::instance() {
  static WorkerPool pool;
  return pool;
}

void WorkerPool::afterForkInChild() {
  WorkerPool& pool = instance();
  State* fresh = new State;
  fresh->abandoned = pool.state_;
  pool.state_ = fresh;
}

// state_ is not freed: a forked child's abandoned states hang off it and must stay reachable
// (they hold the parent's threads, which the child may not touch), and the pool lives as long
// as the process anyway.
WorkerPool::~WorkerPool() { shutdown(); }

void WorkerPool::shutdown() {
  std::lock_guard<std::mutex> lock(state_->mutex);
  joinAll(state_);
}

int WorkerPool::workers() {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return static_cast<int>(state_->workers.size());
}

void WorkerPool::runParts(int parts, PartFn fn, void* ctx, int64_t spin_us) {
  State* s = state_;
  std::lock_guard<std::mutex> lock(s->mutex);
  int helpers = std::min(parts, kMaxThreads) - 1;
  // Lazily grow; if the system refuses a thread, use the ones there are.
  while (static_cast<int>(s->workers.size()) < helpers) {
    auto w = std::make_unique<Worker>();
    w->state = s;
    try {
      w->thread = std::thread(workerLoop, w.get());
    } catch (const std::system_error&) {
      helpers = static_cast<int>(s->workers.size());
      break;
    }
    s->workers.push_back(std::move(w));
  }
  s->failed.store(false, std::memory_order_relaxed);
  s->error = nullptr;
  s->remaining.store(static_cast<uint32_t>(helpers), std::memory_order_relaxed);
  for (int i = 0; i < helpers; ++i) post(s->workers[i].get(), fn, ctx, i + 1);
  for (int part = 0; part < parts; part = part == 0 ? helpers + 1 : part + 1) {
    try {
      fn(ctx, part);
    } catch (...) {
      s->fail();
    }
  }
  await(&s->remaining, &s->caller_sleeping, spin_us,
        [&] { return s->remaining.load(std::memory_order_acquire) == 0; });
  if (s->failed.load(std::memory_order_relaxed)) std::rethrow_exception(s->error);
}

}  // namespace perseus
