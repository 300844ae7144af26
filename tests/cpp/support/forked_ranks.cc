#include "support/forked_ranks.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <thread>

namespace perseus::testing {

std::string ChildStatus::describe() const {
  if (timed_out) return "timed out (killed)";
  if (signal != 0) return "killed by signal " + std::to_string(signal);
  return "exit code " + std::to_string(exit_code);
}

std::vector<ChildStatus> runForked(int n, const std::function<int(int)>& body,
                                   std::chrono::milliseconds timeout) {
  std::fflush(nullptr);
  std::vector<pid_t> pids(n, -1);
  for (int i = 0; i < n; ++i) {
    pid_t pid = ::fork();
    if (pid == 0) {
      int code = 3;
      try {
        code = body(i);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "child %d: uncaught exception: %s\n", i, e.what());
      } catch (...) {
        std::fprintf(stderr, "child %d: uncaught non-standard exception\n", i);
      }
      std::fflush(nullptr);
      ::_exit(code);  // skip the parent's atexit handlers and gtest teardown
    }
    pids[i] = pid;
  }
  std::vector<ChildStatus> out(n);
  std::vector<bool> done(n, false);
  auto deadline = std::chrono::steady_clock::now() + timeout;
  int left = n;
  while (left > 0) {
    for (int i = 0; i < n; ++i) {
      if (done[i] || pids[i] < 0) continue;
      int status = 0;
      if (::waitpid(pids[i], &status, WNOHANG) != pids[i]) continue;
      done[i] = true;
      --left;
      if (WIFEXITED(status)) out[i].exit_code = WEXITSTATUS(status);
      if (WIFSIGNALED(status)) out[i].signal = WTERMSIG(status);
    }
    if (left == 0) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      for (int i = 0; i < n; ++i) {
        if (done[i] || pids[i] < 0) continue;
        ::kill(pids[i], SIGKILL);
        int status = 0;
        ::waitpid(pids[i], &status, 0);
        out[i].timed_out = true;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return out;
}

}  // namespace perseus::testing
