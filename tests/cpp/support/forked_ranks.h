// Runs test bodies in forked child processes, for multi-process tests of real sockets and shared
// memory. Every run is bounded: children still alive at the deadline are SIGKILLed and reported.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace perseus::testing {

struct ChildStatus {
  int exit_code = -1;  // valid when signal == 0
  int signal = 0;      // the signal that ended the child, 0 if it exited
  bool timed_out = false;
  bool ok() const { return signal == 0 && exit_code == 0 && !timed_out; }
  std::string describe() const;
};

// Forks `n` children; child i runs body(i) and exits with its return value (an exception that
// escapes is printed to stderr and becomes exit code 3). Waits for all of them up to `timeout`.
// Call from a single-threaded point of the test.
std::vector<ChildStatus> runForked(int n, const std::function<int(int)>& body,
                                   std::chrono::milliseconds timeout);

}  // namespace perseus::testing
