#include "backends/nccl/nccl_comm.h"

#include <chrono>
#include <thread>

#include "backends/nccl/cuda_util.h"
#include "backends/nccl/launch_watchdog.h"
#include "backends/nccl/nccl_api.h"
#include "collectives/collectives.h"
#include "common/logging.h"
#include "common/status.h"

namespace perseus::nccl {
namespace {

ncclConfig_t configOf(bool blocking) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = blocking ? 1 : 0;
  return config;
}

const NcclApi& api() {
  std::string why;
  const NcclApi* a = ncclApi(&why);
  if (a == nullptr) throw UnsupportedError("NCCL data plane requested but " + why);
  return *a;
}

}  // namespace

NcclComm::NcclComm(const NcclApi* api, ncclComm_t comm, int rank, int size, int device,
                   double timeout_s, std::string label, bool blocking)
    : api_(api),
      comm_(comm),
      rank_(rank),
      size_(size),
      device_(device),
      timeout_s_(timeout_s),
      label_(std::move(label)),
      blocking_(blocking) {
  if (blocking_) LaunchWatchdog::instance().watch(this);
}

std::shared_ptr<NcclComm> NcclComm::create(collectives::Communicator& comm, int device,
                                           double timeout_s, std::string label) {
  const NcclApi& a = api();
  ncclUniqueId id{};
  if (comm.rank() == 0) {
    ncclResult_t r = a.getUniqueId(&id);
    if (r != ncclSuccess) {
      throw InternalError(PERSEUS_STR("ncclGetUniqueId for "
                                      << label << " failed: " << a.getErrorString(r) << ": "
                                      << a.getLastError(nullptr)));
    }
  }
  if (comm.size() > 1) collectives::broadcast(comm, &id, sizeof(id), 0);
  DeviceGuard guard(device);
  ncclConfig_t config = configOf(false);
  ncclComm_t raw = nullptr;
  ncclResult_t r = a.commInitRankConfig(&raw, comm.size(), id, comm.rank(), &config);
  if (raw == nullptr) {
    throw InternalError(PERSEUS_STR("ncclCommInitRankConfig for "
                                    << label << " on device " << device << " failed: "
                                    << a.getErrorString(r) << ": " << a.getLastError(nullptr)));
  }
  std::shared_ptr<NcclComm> joined(
      new NcclComm(&a, raw, comm.rank(), comm.size(), device, timeout_s, label, false));
  joined->check(r, "ncclCommInitRankConfig");
  // Note [Blocking launches]: collectives go to a blocking twin; the split, made on the
  // non-blocking communicator, is still waited out against the deadline.
  std::shared_ptr<NcclComm> twin = joined->split(0, comm.rank(), std::move(label));
  twin->parent_ = std::move(joined);
  PERSEUS_LOG(DEBUG, kCuda) << "NCCL " << a.version << " communicator for " << twin->label_
                            << " ready on device " << device;
  return twin;
}

std::shared_ptr<NcclComm> NcclComm::split(int color, int key, std::string label) {
  DeviceGuard guard(device_);
  ncclConfig_t config = configOf(true);
  // On a non-blocking parent NCCL fills *newcomm from its own thread once the split is done,
  // so the slot lives on the heap; if we give up (timeout) it is leaked, never freed under NCCL.
  auto slot = std::make_unique<ncclComm_t>(nullptr);
  try {
    run("ncclCommSplit", [&] { return api_->commSplit(comm_, color, key, slot.get(), &config); });
    // A non-blocking parent may answer ncclSuccess while its state stays ncclInProgress until
    // the child exists.
    settle("ncclCommSplit");
  } catch (...) {
    slot.release();
    throw;
  }
  ncclComm_t raw = *slot;
  PERSEUS_CHECK(raw != nullptr, "ncclCommSplit of " << label_ << " returned no communicator");
  std::shared_ptr<NcclComm> child(
      new NcclComm(api_, raw, -1, -1, device_, timeout_s_, std::move(label), true));
  child->settle("ncclCommSplit (child)");
  int rank = 0, size = 0;
  api_->commUserRank(raw, &rank);
  api_->commCount(raw, &size);
  child->rank_ = rank;
  child->size_ = size;
  return child;
}

NcclComm::~NcclComm() {
  if (blocking_) LaunchWatchdog::instance().forget(this);
  if (aborted_.load()) return;
  // Destroy waits for the work enqueued on this communicator, which the owner already waited
  // for; a communicator whose peers are gone was aborted instead.
  DeviceGuard guard(device_);
  ncclResult_t r = api_->commDestroy(comm_);
  if (r != ncclSuccess && r != ncclInProgress) {
    PERSEUS_LOG(WARNING, kCuda) << "ncclCommDestroy of " << label_ << ": "
                                << api_->getErrorString(r);
  }
}

void NcclComm::check(ncclResult_t result, const char* what) {
  if (timed_out_.load()) timedOut(what);
  if (result == ncclSuccess) return;
  if (result != ncclInProgress) fail(result, what);
  settle(what);
}

void NcclComm::settle(const char* what) {
  using Clock = std::chrono::steady_clock;
  // A non-blocking communicator finishes a call (its creation, a split; collectives go to the
  // blocking twin) on a thread NCCL starts for it: poll tightly (yielding the core) for
  // kTightPoll, and only then nap between polls. When launches still went through here, napping
  // 100 us after 1000 polls made every 4-byte GPU allreduce's launch take ~115 us.
  constexpr auto kTightPoll = std::chrono::milliseconds(2);
  constexpr auto kNap = std::chrono::microseconds(20);
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(timeout_s_));
  for (uint32_t polls = 1;; ++polls) {
    if (aborted_.load()) throw ShutDownError("NCCL communicator of " + label_ + " was aborted");
    ncclResult_t state = ncclSuccess;
    ncclResult_t r = api_->commGetAsyncError(comm_, &state);
    if (r != ncclSuccess) fail(r, "ncclCommGetAsyncError");
    if (state == ncclSuccess) return;
    if (state != ncclInProgress) fail(state, what);
    if (polls % 64 != 0) continue;
    const auto now = Clock::now();
    if (now > deadline) {
      abort();
      timedOut(what);
    }
    if (now - start < kTightPoll) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(kNap);
    }
  }
}

void NcclComm::timedOut(const char* what) {
  throw TimeoutError(PERSEUS_STR(
      what << " on the NCCL communicator of " << label_ << " (device " << device_
           << ") did not finish within PERSEUS_TIMEOUT=" << timeout_s_
           << " s: a rank of the set is missing or stuck; the communicator was aborted"));
}

void NcclComm::expireIfStuck(std::chrono::steady_clock::time_point now) {
  const int64_t since = busy_since_.load(std::memory_order_acquire);
  if (since == 0 || aborted_.load()) return;
  const auto began =
      std::chrono::steady_clock::time_point(std::chrono::steady_clock::duration(since));
  if (now - began < std::chrono::duration<double>(timeout_s_)) return;
  timed_out_.store(true);
  const char* what = busy_what_.load(std::memory_order_relaxed);
  PERSEUS_LOG(ERROR, kCuda) << (what ? what : "an NCCL call") << " on the NCCL communicator of "
                            << label_ << " has not returned within PERSEUS_TIMEOUT=" << timeout_s_
                            << " s: aborting it";
  abort();
}

void NcclComm::checkAsync() {
  if (aborted_.load()) return;
  ncclResult_t state = ncclSuccess;
  ncclResult_t r = api_->commGetAsyncError(comm_, &state);
  if (r != ncclSuccess) fail(r, "ncclCommGetAsyncError");
  if (state != ncclSuccess && state != ncclInProgress)
    fail(state, "an asynchronous NCCL operation");
}

void NcclComm::fail(ncclResult_t result, const char* what) {
  std::string detail = api_->getErrorString(result);
  const char* last = api_->getLastError(comm_);
  if (last != nullptr && *last != '\0') detail += std::string(": ") + last;
  abort();
  std::string msg =
      PERSEUS_STR(what << " on the NCCL communicator of " << label_ << " (device " << device_
                       << ") failed: " << detail << "; the communicator was aborted");
  switch (result) {
    case ncclRemoteError:
    case ncclSystemError:
      throw PeerLostError(-1, msg + " (a peer process or its connection is gone)");
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      throw InvalidArgumentError(msg);
    default:
      throw InternalError(msg);
  }
}

void NcclComm::abort() {
  std::lock_guard<std::mutex> lock(abort_mutex_);
  if (aborted_.exchange(true)) return;
  PERSEUS_LOG(WARNING, kCuda) << "aborting the NCCL communicator of " << label_;
  ncclResult_t r = api_->commAbort(comm_);
  if (r != ncclSuccess && r != ncclInProgress) {
    PERSEUS_LOG(WARNING, kCuda) << "ncclCommAbort of " << label_ << ": " << api_->getErrorString(r);
  }
  if (parent_) parent_->abort();
}

}  // namespace perseus::nccl
