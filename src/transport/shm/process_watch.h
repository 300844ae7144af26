// Tells whether another process of this host has exited. Uses a pidfd (Linux >= 5.3), which
// also reports an exited process that its parent has not reaped yet and cannot be fooled by
// pid reuse; falls back to kill(pid, 0) plus /proc/<pid>/stat on older kernels.
#pragma once

#include <sys/types.h>

namespace perseus::transport::shm {

class ProcessWatch {
 public:
  // Call while `pid` is known to be alive (right after start-up). A pid that is this process
  // is never reported gone (ranks as threads). A pid that is not visible here (another pid
  // namespace) disables the check: gone() then always returns false.
  explicit ProcessWatch(pid_t pid);
  ~ProcessWatch();
  ProcessWatch(const ProcessWatch&) = delete;
  ProcessWatch& operator=(const ProcessWatch&) = delete;

  // Cheap enough to call every few milliseconds (one poll() or kill() syscall).
  bool gone() const;
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_;
  bool enabled_ = true;
  int pidfd_ = -1;
};

}  // namespace perseus::transport::shm
