#include "support/shared_barrier.h"

#include <dirent.h>
#include <sys/mman.h>
#include <unistd.h>

#include <thread>

#include "common/status.h"

namespace perseus::testing {

SharedBarrier::SharedBarrier(int parties, std::chrono::milliseconds timeout)
    : parties_(parties), timeout_(timeout) {
  void* p =
      ::mmap(nullptr, sizeof(State), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw InternalError("SharedBarrier: mmap failed");
  state_ = new (p) State{};
}

SharedBarrier::~SharedBarrier() { ::munmap(state_, sizeof(State)); }

void SharedBarrier::wait() {
  const uint32_t gen = state_->generation.load(std::memory_order_acquire);
  if (state_->arrived.fetch_add(1, std::memory_order_acq_rel) + 1 ==
      static_cast<uint32_t>(parties_)) {
    state_->arrived.store(0, std::memory_order_relaxed);
    state_->generation.fetch_add(1, std::memory_order_release);
    return;
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  while (state_->generation.load(std::memory_order_acquire) == gen) {
    if (std::chrono::steady_clock::now() > deadline) {
      throw TimeoutError("SharedBarrier: a participant did not arrive");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

std::string uniqueJobId(const char* tag) {
  static std::atomic<int> counter{0};
  return "t" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" + tag;
}

std::vector<std::string> shmNamesOf(const std::string& job_id) {
  std::vector<std::string> out;
  const std::string prefix = "perseus-" + job_id + "-";
  DIR* d = ::opendir("/dev/shm");
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.compare(0, prefix.size(), prefix) == 0) out.push_back(name);
  }
  ::closedir(d);
  return out;
}

}  // namespace perseus::testing
