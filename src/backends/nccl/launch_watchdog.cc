#include "backends/nccl/launch_watchdog.h"

#include <algorithm>
#include <chrono>

#include "backends/nccl/nccl_comm.h"

namespace perseus::nccl {

namespace {
// How often busy communicators are looked at: a stuck call fails within PERSEUS_TIMEOUT plus
// this.
constexpr auto kInterval = std::chrono::milliseconds(100);
}  // namespace

LaunchWatchdog& LaunchWatchdog::instance() {
  static LaunchWatchdog* watchdog = new LaunchWatchdog();
  return *watchdog;
}

void LaunchWatchdog::watch(NcclComm* comm) {
  std::lock_guard<std::mutex> lock(mutex_);
  comms_.push_back(comm);
  if (!started_) {
    started_ = true;
    // Detached: it only sleeps and looks, and lives as long as the process.
    std::thread([this] { loop(); }).detach();
  }
}

void LaunchWatchdog::forget(NcclComm* comm) {
  std::lock_guard<std::mutex> lock(mutex_);
  comms_.erase(std::remove(comms_.begin(), comms_.end(), comm), comms_.end());
}

void LaunchWatchdog::loop() {
  for (;;) {
    std::this_thread::sleep_for(kInterval);
    const auto now = std::chrono::steady_clock::now();
    // Under the lock: a communicator being destroyed waits in forget() until this pass is done.
    std::lock_guard<std::mutex> lock(mutex_);
    for (NcclComm* c : comms_) c->expireIfStuck(now);
  }
}

}  // namespace perseus::nccl
