// Rate limit for a repeated warning: the first `burst` of each window are logged, the rest are
// counted, and the next one logged after the window says how many were left out ("(and 57 more
// in the last 60 s like it)"). One thread only (the caller's own lock, or one owner thread).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace perseus {

class LogRateLimit {
 public:
  using Clock = std::chrono::steady_clock;

  LogRateLimit(int burst, std::chrono::seconds window) : burst_(burst), window_(window) {}

  // Whether to log a message now; `*note` gets the count of those left out since the last
  // window, to append (empty when none were).
  bool allow(Clock::time_point now, std::string* note) {
    note->clear();
    if (logged_ == 0 || now - window_start_ >= window_) {
      if (suppressed_ > 0) *note = " (and " + summary(now) + " like it)";
      window_start_ = now;
      logged_ = 0;
      suppressed_ = 0;
    }
    if (logged_ < burst_) {
      ++logged_;
      return true;
    }
    ++suppressed_;
    return false;
  }

  // How many are held back now, for a last line when the source goes away.
  int64_t suppressed() const { return suppressed_; }
  // "57 more in the last 60 s" (the ones held back since the window began).
  std::string summary(Clock::time_point now) const {
    const auto s = std::chrono::duration_cast<std::chrono::seconds>(now - window_start_).count();
    return std::to_string(suppressed_) + " more in the last " + std::to_string(s) + " s";
  }

 private:
  const int burst_;
  const std::chrono::seconds window_;
  Clock::time_point window_start_{};
  int logged_ = 0;
  int64_t suppressed_ = 0;
};

}  // namespace perseus
