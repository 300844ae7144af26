// Straggler detection (PERSEUS_STRAGGLER_THRESHOLD): which rank keeps arriving late at the
// global set's negotiated collectives, so that the others wait for it.
//
// Every response a rank negotiates ends at about the same moment on every rank (the control
// exchange that completes it), so a rank's wait for it, from its own submission, is shorter by
// exactly how much later it submitted: mean wait of the others minus this rank's mean wait is
// how late this rank arrives, with no clock shared between hosts. Each rank sums its waits
// over a window and sends the sums to set rank 0 (one small message, no reply), which compares
// the ranks and flags a rank once when it was later than the others by more than the threshold
// (a fraction of the step) in kStrikes windows in a row. The step is estimated as the window's
// time over the number of times its first response name came back. A window closes when
// rank 0 says so in the control vector (ControlFlag::kStragglerWindow: at least kWindowS
// seconds and kWindowSteps steps, or kMaxWindowS), so every member sends at the same control
// exchange.
//
// Contract: the Cycle (under the cycle lock), global set only; record() per negotiated
// response, exchange() on every member at the control exchange that carried the flag.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "collectives/communicator.h"

namespace perseus::engine {

class StragglerWatch {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr double kWindowS = 1.0;
  static constexpr double kWindowSteps = 4;
  // A window whose first name did not come back (a one-off collective) closes after this long
  // unevaluated, so that the next window starts from another name.
  static constexpr double kMaxWindowS = 10.0;
  static constexpr int kStrikes = 3;  // windows in a row above the threshold

  // `hostnames`: by global rank (the global set's set rank is the global rank).
  StragglerWatch(double threshold, std::vector<std::string> hostnames);

  // One response this rank negotiated, `wait_s` after it submitted it.
  void record(const std::string& name, double wait_s);
  // Rank 0: whether this window is long enough to close (set ControlFlag::kStragglerWindow).
  bool windowDue(Clock::time_point now) const;
  // Sends this window's sums to rank 0, which evaluates them; starts the next window.
  // Collective over `comm`.
  void exchange(collectives::Communicator& comm);

  // Rank 0: the flag it logged for a rank (empty until one was flagged): for tests.
  const std::string& lastFlag() const { return last_flag_; }

 private:
  struct Window {
    double wait_sum = 0.0;  // seconds, over this rank's negotiated responses
    double count = 0.0;     // negotiated responses
    double steps = 0.0;     // returns of the window's first name
    double elapsed = 0.0;   // seconds the window lasted
  };
  void evaluate(const std::vector<Window>& windows);

  const double threshold_;
  const std::vector<std::string> hostnames_;
  Window window_;
  std::string first_name_;
  Clock::time_point window_start_ = Clock::now();
  std::vector<int> strikes_;
  std::vector<bool> flagged_;
  std::string last_flag_;
};

}  // namespace perseus::engine
