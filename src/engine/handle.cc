#include "engine/handle.h"

#include <sched.h>
#include <time.h>

#include <chrono>

#include "backends/gpu_backend.h"

namespace perseus::engine {

void OwnedTensor::allocate(DataType t, std::vector<int64_t> s) {
  dtype = t;
  shape = std::move(s);
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  bytes = static_cast<size_t>(n) * dataTypeSize(t);
  // At least one byte so that data() is a valid pointer even for empty outputs.
  data = HostBufferPool::instance().take(bytes);
}

namespace {
int64_t steadyNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// CLOCK_MONOTONIC_COARSE: steady_clock's clock as of the last tick, never ahead of it.
int64_t coarseSteadyNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}
// Handle ids: unique in the process, across engines (create()).
std::atomic<int64_t> next_handle_id{1};
}  // namespace

std::shared_ptr<Handle> Handle::create(std::string name) {
  auto h = std::make_shared<Handle>(next_handle_id.fetch_add(1, std::memory_order_relaxed),
                                    std::move(name));
  h->stamp(true);
  return h;
}

std::shared_ptr<Handle> Handle::create(Name name, bool timed) {
  auto h = std::make_shared<Handle>(next_handle_id.fetch_add(1, std::memory_order_relaxed),
                                    std::move(name));
  h->stamp(timed);
  return h;
}

void Handle::stamp(bool timed) {
  timed_ = timed;
  submitted_ns_ = timed ? steadyNs() : coarseSteadyNs();
}

namespace {
// Spin first: on the fast path the engine finishes within microseconds, and a blocking wake-up
// costs tens of microseconds on a busy host. Yields so a spinning waiter never starves the
// engine thread when cores are scarce. Returns whether `ready()` became true within spin_us.
template <typename Ready>
bool spinFor(int64_t spin_us, std::chrono::steady_clock::time_point start, Ready ready) {
  if (spin_us <= 0) return false;
  const auto spin_end = start + std::chrono::microseconds(spin_us);
  while (std::chrono::steady_clock::now() < spin_end) {
    if (ready()) return true;
    sched_yield();
  }
  return false;
}
}  // namespace

bool Handle::wait(double timeout_s, int64_t spin_us) const {
  using Clock = std::chrono::steady_clock;
  if (done()) return true;
  const auto start = Clock::now();
  if (spinFor(spin_us, start, [&] { return done(); })) return true;
  std::unique_lock<std::mutex> lock(mu_);
  if (timeout_s < 0) {
    cv_.wait(lock, [&] { return done(); });
    return true;
  }
  auto deadline =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  return cv_.wait_until(lock, deadline, [&] { return done(); });
}

void Handle::setCallback(Callback cb) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!completing_) {
      callback_ = std::move(cb);
      return;
    }
  }
  // Already completed (or completing: complete() runs the callback it saw under the lock,
  // and a callback set afterwards runs here after done() is visible).
  wait(-1);
  cb(status_, message_);
}

void Handle::complete(StatusCode status, const std::string& message) {
  Callback cb;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (completing_) return;  // the first completion wins (e.g. failure racing shutdown)
    completing_ = true;
    if (timed_) completed_ns_ = steadyNs();
    status_ = status;
    message_ = message;
    cb = std::move(callback_);
    done_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
  if (cb) cb(status, message);
}

void Handle::setGpuWork(std::vector<std::shared_ptr<backends::GpuWork>> works) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    gpu_works_ = std::move(works);
    has_gpu_work_ = true;
    gpu_work_published_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
}

void Handle::streamWait(void* stream, int64_t spin_us) const {
  // A caller that orders its stream right after submitting (a blocking torch.distributed call)
  // would otherwise sleep on cv_ for the engine's few-microsecond launch, and its wake-up
  // would cost more than the launch.
  if (!streamReady()) {
    spinFor(spin_us, std::chrono::steady_clock::now(), [&] { return streamReady(); });
  }
  {
    std::unique_lock<std::mutex> lock(mu_);
    // Negotiation may still be running: the work does not exist yet.
    cv_.wait(lock, [&] { return has_gpu_work_ || done(); });
    if (done() && status_ != StatusCode::kOk) throw Error(status_, message_);
    if (!has_gpu_work_) return;  // a CPU op that finished: nothing on any stream to wait for
  }
  // Published once, never changed after: read without the lock and without a copy.
  for (const auto& w : gpu_works_) w->streamWait(stream);
}

HandleTable::HandleTable() : ring_(kRingSize) {}

void HandleTable::insert(std::shared_ptr<Handle> handle) {
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t id = handle->id();
  Place& p = ring_[static_cast<size_t>(id) & (kRingSize - 1)];
  if (p.id == 0) {
    p.id = id;
    p.handle = std::move(handle);
  } else {
    overflow_[id] = std::move(handle);
  }
  ++live_;
}

std::shared_ptr<Handle> HandleTable::find(int64_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  const Place& p = ring_[static_cast<size_t>(id) & (kRingSize - 1)];
  if (p.id == id && id != 0) return p.handle;
  if (overflow_.empty()) return nullptr;
  auto it = overflow_.find(id);
  return it == overflow_.end() ? nullptr : it->second;
}

bool HandleTable::release(int64_t id) {
  std::shared_ptr<Handle> last;  // destroyed after the lock is let go
  std::lock_guard<std::mutex> lock(mu_);
  Place& p = ring_[static_cast<size_t>(id) & (kRingSize - 1)];
  if (p.id == id && id != 0) {
    p.id = 0;
    last = std::move(p.handle);
  } else {
    auto it = overflow_.find(id);
    if (it == overflow_.end()) return false;
    last = std::move(it->second);
    overflow_.erase(it);
  }
  --live_;
  return true;
}

size_t HandleTable::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_;
}

}  // namespace perseus::engine
