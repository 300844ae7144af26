#include "transport/shm/process_watch.h"

#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string>

#include "common/logging.h"

namespace perseus::transport::shm {
namespace {

// A zombie still answers kill(pid, 0); /proc says 'Z' (or 'X') for it.
bool isZombie(pid_t pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return false;
  char buf[512];
  const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  const std::string stat(buf);
  const size_t paren = stat.rfind(')');  // the command name may itself contain ')'
  if (paren == std::string::npos || paren + 2 >= stat.size()) return false;
  return stat[paren + 2] == 'Z' || stat[paren + 2] == 'X';
}

}  // namespace

ProcessWatch::ProcessWatch(pid_t pid) : pid_(pid) {
  if (pid_ == ::getpid()) {
    enabled_ = false;
    return;
  }
#ifdef SYS_pidfd_open
  pidfd_ = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
  if (pidfd_ >= 0) return;
  if (errno == ESRCH) {
    // The owner wrote this pid a moment ago and is alive (it passed the start-up barrier), so
    // it lives in another pid namespace: pids say nothing here. The "closed" flag still works.
    PERSEUS_LOG(INFO, kTransport) << "pid " << pid_ << " of a local rank is not visible here; "
                                  << "its death will be noticed by timeout, not by pid";
    enabled_ = false;
    return;
  }
#endif
  if (::kill(pid_, 0) != 0 && errno == ESRCH) enabled_ = false;
}

ProcessWatch::~ProcessWatch() {
  if (pidfd_ >= 0) ::close(pidfd_);
}

bool ProcessWatch::gone() const {
  if (!enabled_) return false;
  if (pidfd_ >= 0) {
    pollfd p{pidfd_, POLLIN, 0};
    return ::poll(&p, 1, 0) > 0;  // readable once the process has exited
  }
  if (::kill(pid_, 0) != 0 && errno == ESRCH) return true;
  return isZombie(pid_);
}

}  // namespace perseus::transport::shm
