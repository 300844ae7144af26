#include "transport/shm/futex.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <climits>

namespace perseus::transport::shm {

void futexWait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::microseconds timeout) {
  if (timeout.count() <= 0) return;
  struct timespec ts;
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1000000);
  ts.tv_nsec = static_cast<long>((timeout.count() % 1000000) * 1000);
  // EAGAIN (value already changed), EINTR and ETIMEDOUT all mean "re-check": nothing to report.
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futexWakeAll(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace perseus::transport::shm
