#include "engine/cycle/straggler_watch.h"

#include <algorithm>
#include <iomanip>
#include <sstream>

#include "common/logging.h"

namespace perseus::engine {

StragglerWatch::StragglerWatch(double threshold, std::vector<std::string> hostnames)
    : threshold_(threshold), hostnames_(std::move(hostnames)) {}

void StragglerWatch::record(const std::string& name, double wait_s) {
  if (first_name_.empty()) first_name_ = name;
  if (name == first_name_) window_.steps += 1;
  window_.wait_sum += wait_s;
  window_.count += 1;
}

bool StragglerWatch::windowDue(Clock::time_point now) const {
  const double elapsed = std::chrono::duration<double>(now - window_start_).count();
  return elapsed >= kWindowS && (window_.steps >= kWindowSteps || elapsed >= kMaxWindowS);
}

void StragglerWatch::exchange(collectives::Communicator& comm) {
  const auto now = Clock::now();
  window_.elapsed = std::chrono::duration<double>(now - window_start_).count();
  const int n = comm.size();
  if (comm.rank() != 0) {
    comm.exchange({{0, &window_, sizeof(window_)}}, {});
  } else {
    std::vector<Window> all(n);
    all[0] = window_;
    std::vector<transport::RecvOp> recvs;
    for (int r = 1; r < n; ++r) recvs.push_back({r, &all[r], sizeof(Window)});
    comm.exchange({}, recvs);
    evaluate(all);
  }
  window_ = Window{};
  first_name_.clear();
  window_start_ = now;
}

void StragglerWatch::evaluate(const std::vector<Window>& windows) {
  const int n = static_cast<int>(windows.size());
  const Window& own = windows[0];
  if (n < 2 || own.steps < 2 || own.elapsed <= 0) return;  // no repeated step to compare
  const double step_s = own.elapsed / own.steps;
  strikes_.resize(n, 0);
  flagged_.resize(n, false);
  for (int r = 0; r < n; ++r) {
    double others = 0;
    int counted = 0;
    for (int o = 0; o < n; ++o) {
      if (o == r || windows[o].count == 0) continue;
      others += windows[o].wait_sum / windows[o].count;
      ++counted;
    }
    if (windows[r].count == 0 || counted == 0) continue;
    const double late_s = others / counted - windows[r].wait_sum / windows[r].count;
    // A millisecond floor: scheduling noise on tiny steps is not a straggler.
    const bool late = late_s >= threshold_ * step_s && late_s >= 1e-3;
    strikes_[r] = late ? strikes_[r] + 1 : 0;
    if (strikes_[r] < kStrikes || flagged_[r]) continue;
    flagged_[r] = true;
    std::ostringstream os;
    os << std::fixed << std::setprecision(1) << "Straggler: rank " << r << " (host "
       << (static_cast<size_t>(r) < hostnames_.size() ? hostnames_[r] : "?") << ") arrives "
       << late_s * 1e3 << " ms later than the other ranks at each collective, "
       << std::setprecision(0) << 100 * late_s / step_s << "% of a " << std::setprecision(1)
       << step_s * 1e3 << " ms step, in " << kStrikes
       << " windows in a row; the other ranks wait for it. Look at that rank's load (other "
          "processes, CPU or GPU throttling, data loading). Logged once per rank "
          "(PERSEUS_STRAGGLER_THRESHOLD="
       << std::setprecision(2) << threshold_ << ").";
    last_flag_ = os.str();
    PERSEUS_LOG(WARNING, kEngine) << last_flag_;
  }
}

}  // namespace perseus::engine
