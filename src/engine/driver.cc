// The driver (Note [Engine cycle], Note [Caller-run cycles] in engine.h): the engine thread's
// loop and idle wait, caller-run cycles and parking, waiting for and polling a handle, the
// runtime timeline switch, and shutdown. It is the code that takes the cycle lock (driver.h).
#include "engine/driver.h"

#include <sched.h>

#include <algorithm>

#include "backends/gpu_backend.h"
#include "common/logging.h"
#include "engine/cycle/set_negotiator.h"

namespace perseus::engine {
namespace {

using Clock = std::chrono::steady_clock;

// Note [Caller-run cycles] (engine.h). The window covers the gap between a caller's waits in a
// loop of synchronous calls (a few µs) with a wide margin; a parked engine thread looks for
// due cycles this often.
constexpr std::chrono::microseconds kDriveWindow{2000};
constexpr std::chrono::microseconds kParkSlice{100};
// Note [Caller-run cycles]: a caller that waits only for its GPU work to be enqueued polls GPU
// completion this often at most. A poll is a driver call (cudaEventQuery) per stream, as costly
// as a small op's whole submission; spaced out, one poll retires the works of several ops
// (Note [GPU completion by stream]) and a handle completes this much later at most. The
// completed works are freed on the caller's thread, where they were allocated: retiring them
// on the engine thread instead cost more in the allocator than the polls it saved.
constexpr std::chrono::microseconds kCallerGpuPollGap{20};

// The driver whose cycle this thread is running as a caller: a completion callback that waits
// must not try to drive again (the cycle lock is not recursive).
thread_local const void* t_driving_engine = nullptr;

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

// Note [Caller-run cycles]: the CUDA device of a caller that would run cycles once the process
// uses a GPU (`device` >= 0). The GPU collectives make that device current and leave it so. A
// caller that has it current loses nothing, and gets it set back on the way out should a cycle
// have left another one current. A caller with another device current does not drive: setting
// its device back would make a context current there, creating one where it had none.
class CallerDevice {
 public:
  CallerDevice(backends::GpuBackend* gpu, int device) {
    if (device < 0) return;
    fits_ = gpu != nullptr && gpu->currentDevice() == device;
    if (fits_) gpu_ = gpu;
    saved_ = device;
  }
  ~CallerDevice() {
    if (gpu_ != nullptr) gpu_->restoreDevice(saved_);
  }
  CallerDevice(const CallerDevice&) = delete;
  CallerDevice& operator=(const CallerDevice&) = delete;

  bool fits() const { return fits_; }            // the caller may drive
  bool kept() const { return gpu_ != nullptr; }  // ... and may run CUDA work

 private:
  backends::GpuBackend* gpu_ = nullptr;
  int saved_ = -1;
  bool fits_ = true;
};

}  // namespace

Driver::Driver(Parts parts)
    : transport_(parts.transport),
      params_(*parts.params),
      submissions_(*parts.submissions),
      fast_path_(*parts.fast_path),
      cycle_(*parts.cycle),
      gpu_device_(*parts.gpu_device),
      gpu_(parts.gpu) {}

Driver::~Driver() { shutdown(); }

void Driver::start() {
  thread_ = std::thread([this] { loop(); });
}

bool Driver::wanted() {
  return submissions_.hasQueued() || shutdown_requested_.load() || drive_requested_.load();
}

void Driver::idleWait(bool pending, bool spin) {
  const auto spin_end = Clock::now() + std::chrono::microseconds(spin ? params_.spin_us : 0);
  do {
    if (wanted() || transport_->hasIncoming()) return;
    // GPU work finishing during the spin completes its handle now, not after the spin and
    // the blocking wait below (up to spin_us + a poll interval later).
    if (cycle_.gpuPending()) {
      cycle_.pollGpu();
      if (cycle_.stopped()) return;
    }
    fast_path_.progressAll();
    sched_yield();
  } while (Clock::now() < spin_end);
  // seq_cst flag then re-check (Dekker): with submit() and drive(), which set their flag, then
  // read this one; and with the post lane's callers, which ask it to listen and then read it.
  engine_blocked_.store(true);
  const FastPath::IdleHint hint = fast_path_.idleHint();
  auto timeout = hint.sleep;
  // Pending GPU work is polled each loop turn (Note [GPU completion]): block only briefly.
  if (cycle_.gpuPending()) timeout = std::min(timeout, GpuCompletion::kPollInterval);
  if (pending) {
    auto until_retry =
        std::chrono::duration_cast<std::chrono::microseconds>(next_retry_ - Clock::now());
    timeout = std::max(std::chrono::microseconds(0), std::min(timeout, until_retry));
  }
  if (timeout.count() > 0 && !wanted()) {
    // This thread spun already (above), but pending GPU work is polled only between these
    // short waits: those spin through, as a sleep would add its wake-up to the GPU's finish.
    const auto spin = cycle_.gpuPending() ? timeout : std::chrono::microseconds(0);
    transport_->waitIncoming(timeout, spin);
  }
  fast_path_.awake();
  engine_blocked_.store(false);
}

bool Driver::step(bool* pending) {
  // Stall checks need cycles even when nothing new arrives; they come this often.
  const double retry_s = std::clamp(stallAttentionSeconds(params_) / 4, 0.01, 1.0);
  *pending = false;
  fast_path_.progressAll();
  if (cycle_.gpuPending() && gpuPollDue()) cycle_.pollGpu();
  if (cycle_.stopped()) return false;
  bool fresh = cycle_.drain();
  if (t_driving_engine == this && !caller_gpu_ && gpu_device_.load() >= 0) {
    // A CUDA tensor came in while a caller ran cycles with no device kept (drive()): the engine
    // thread takes over, and the caller's next wait looks at its device.
    if (fresh) cycle_.markWork();
    return false;
  }
  *pending = cycle_.pending();
  bool due = *pending && Clock::now() >= next_retry_;
  if (!fresh && !cycle_.moreWork() && !due && !shutdown_requested_.load() &&
      !transport_->hasIncoming()) {
    return false;
  }
  bool progress = cycle_.run(shutdown_requested_.load());
  if (!progress) {
    next_retry_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(retry_s));
  }
  return true;
}

bool Driver::gpuPollDue() {
  if (t_driving_engine != this || !caller_spaces_gpu_polls_) return true;
  const auto now = Clock::now();
  if (now - caller_gpu_poll_ < kCallerGpuPollGap) return false;
  caller_gpu_poll_ = now;
  return true;
}

bool Driver::drivenRecently() const {
  const int64_t t = last_drive_ns_.load(std::memory_order_relaxed);
  return t != 0 &&
         nowNs() - t < std::chrono::duration_cast<std::chrono::nanoseconds>(kDriveWindow).count();
}

void Driver::park() {
  std::unique_lock<std::mutex> lock(park_mu_);
  park_cv_.wait_for(lock, kParkSlice);
}

void Driver::withCycleLock(const std::function<void()>& fn) {
  std::unique_lock<std::mutex> cycle(cycle_mu_, std::defer_lock);
  while (!cycle.try_lock()) {
    // As drive(): the engine thread gives the lock up between its cycles when asked.
    drive_requested_.store(true);
    if (engine_blocked_.load()) transport_->wake();
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  drive_requested_.store(false);
  fn();
}

std::unique_ptr<Timeline> Driver::swapTimeline(std::unique_ptr<Timeline> timeline,
                                               bool mark_cycles) {
  std::unique_ptr<Timeline> old;
  withCycleLock([&] { old = cycle_.swapTimeline(std::move(timeline), mark_cycles); });
  return old;
}

void Driver::loop() {
  std::unique_lock<std::mutex> cycle(cycle_mu_, std::defer_lock);
  bool idle = false;  // waited since the last work, and nothing came
  while (!cycle_.stopped()) {
    if (!cycle.owns_lock() && !cycle.try_lock()) {
      park();  // a caller is running cycles
      continue;
    }
    bool pending = false;
    const bool worked = step(&pending);
    if (drive_requested_.load() || drivenRecently()) {
      // Callers run the cycles; this thread only looks for due ones (a peer's, with no caller
      // here) once per slice.
      cycle.unlock();
      park();
      continue;
    }
    if (worked) {
      idle = false;
    } else {
      // Pending GPU work is polled in the spin (Note [GPU completion]): keep spinning for it.
      idleWait(pending, !idle || cycle_.gpuPending());
      idle = true;
    }
  }
}

bool Driver::mayDrive(double timeout_s) const {
  return params_.caller_cycles && timeout_s != 0 && t_driving_engine != this && !cycle_.stopped();
}

bool Driver::drive(const Handle& handle, Until until, int64_t spin_us) {
  const CallerDevice device(gpu_, gpu_device_.load());
  if (!device.fits()) return false;
  const auto spin = std::chrono::microseconds(std::max<int64_t>(spin_us, 0));
  std::unique_lock<std::mutex> cycle(cycle_mu_, std::try_to_lock);
  if (!cycle.owns_lock()) {
    // The engine thread gives the lock up between its cycles when asked.
    drive_requested_.store(true);
    if (engine_blocked_.load()) transport_->wake();
    const auto end = Clock::now() + spin;
    while (!cycle.try_lock()) {
      if (reached(handle, until) || cycle_.stopped() || Clock::now() >= end) {
        drive_requested_.store(false);
        return true;
      }
      sched_yield();  // the engine thread may need this core to reach its next check
    }
  }
  drive_requested_.store(false);
  // While this thread holds the lock the engine thread parks anyway; the window that keeps
  // it parked afterwards starts when the lock is given back, below.
  t_driving_engine = this;
  caller_gpu_ = device.kept();
  caller_spaces_gpu_polls_ = until == Until::kStreamReady;
  bool stalled = false;
  // The idle time is counted from the first turn that found nothing to do.
  bool idle = false;
  Clock::time_point idle_since;
  while (!reached(handle, until) && !cycle_.stopped()) {
    bool pending = false;
    if (step(&pending)) {
      idle = false;
    } else if (!caller_gpu_ && gpu_device_.load() >= 0) {
      stalled = true;  // step() handed the cycles to the engine thread
      break;
    } else if (!idle) {
      idle = true;
      idle_since = Clock::now();
    } else if (Clock::now() - idle_since >= spin) {
      stalled = true;
      break;
    }
  }
  caller_gpu_ = false;
  caller_spaces_gpu_polls_ = false;
  t_driving_engine = nullptr;
  // A stalled caller blocks next; the engine thread listens again from now on.
  last_drive_ns_.store(stalled ? 0 : nowNs(), std::memory_order_relaxed);
  cycle.unlock();
  if (stalled) park_cv_.notify_one();
  return true;
}

bool Driver::poll(Handle& handle) {
  if (handle.done()) return true;
  fast_path_.progress(handle);
  if (handle.done()) return true;
  // A busy poll loop keeps its core: a parked engine thread, waking once per slice, would get
  // a core only when the poller's time slice ends, and so may the engine thread that a
  // submission woke, when the scheduler queued it behind the poller (a 4-byte allreduce took
  // 4 ms, one scheduler tick, in some runs). So the poller also gives its core up once.
  if (last_drive_ns_.load(std::memory_order_relaxed) != 0) {
    last_drive_ns_.store(0, std::memory_order_relaxed);
    park_cv_.notify_one();
  }
  sched_yield();
  return false;
}

void Driver::setCallback(Handle& handle, Handle::Callback cb) {
  handle.setCallback(std::move(cb));
  if (fast_path_.listenFor(handle)) wakeIfBlocked();
}

bool Driver::waitFor(Handle& handle, double timeout_s, int64_t spin_us) {
  if (handle.done()) return true;
  // A pending post is watched first; if it is still pending after the spin, the engine thread
  // listens for it from now on.
  if (timeout_s != 0 && fast_path_.watch(handle, spin_us)) wakeIfBlocked();
  if (handle.done()) return true;
  const auto start = timeout_s > 0 ? Clock::now() : Clock::time_point{};
  // A wait that did not drive (Note [Caller-run cycles]) spins first: the engine thread
  // finishes small ops within microseconds, and a blocking wake-up costs tens of them. A
  // caller that drove has spun already.
  int64_t spin = spin_us;
  if (mayDrive(timeout_s) && drive(handle, Until::kDone, spin_us)) {
    if (handle.done()) return true;
    spin = 0;
  }
  if (timeout_s < 0) return handle.wait(-1, spin);
  const double left = timeout_s - std::chrono::duration<double>(Clock::now() - start).count();
  return handle.wait(std::max(left, 0.0), spin);
}

void Driver::streamWait(Handle& handle, void* stream, int64_t spin_us) {
  // A pending post (a CPU op: nothing on a stream, so this waits on the host) is watched first,
  // as in waitFor().
  if (!handle.streamReady() && fast_path_.watch(handle, spin_us)) wakeIfBlocked();
  // A CUDA op's caller runs cycles until the work is enqueued, not until the GPU finished it.
  int64_t spin = spin_us;
  if (!handle.streamReady() && mayDrive(-1) && drive(handle, Until::kStreamReady, spin_us)) {
    spin = 0;
  }
  handle.streamWait(stream, spin);
}

void Driver::shutdown() {
  // A second caller returns once the first one's shutdown is complete.
  std::call_once(shutdown_once_, [this] {
    if (!thread_.joinable()) return;
    shutdown_requested_.store(true);
    transport_->wake();
    thread_.join();
    // Anything submitted after the thread ended fails here rather than waiting forever. A
    // caller may still be in a cycle's last turn (it stops at the next one).
    std::lock_guard<std::mutex> cycle(cycle_mu_);
    cycle_.stopAll(StatusCode::kShutDown, "Perseus was shut down");
    cycle_.flushTimeline();
  });
}

}  // namespace perseus::engine
