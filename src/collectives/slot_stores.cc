#include "collectives/slot_stores.h"

namespace perseus::collectives {
namespace {
// Weight of a new sample in the running time per byte of the mode in use.
constexpr double kSmoothing = 0.3;
}  // namespace

SlotStoreChooser& SlotStoreChooser::instance() {
  static SlotStoreChooser chooser;
  return chooser;
}

int SlotStoreChooser::classOf(size_t bytes) {
  int c = 0;
  for (size_t b = bytes >> 16; b >= 4 && c < kClasses - 1; b >>= 2) ++c;
  return c;
}

SlotStores SlotStoreChooser::pick(const std::string& setting, size_t bytes) {
  if (setting == "cached") return SlotStores::kCached;
  if (setting == "streaming") return SlotStores::kStreaming;
  std::lock_guard<std::mutex> lock(mu_);
  SizeClass& c = classes_[classOf(bytes)];
  const int other = 1 - c.best;
  const bool trial = c.ns_per_byte[c.best] > 0.0 &&
                     (c.ns_per_byte[other] == 0.0 || ++c.since_trial >= c.period);
  if (trial) c.since_trial = 0;
  return static_cast<SlotStores>(trial ? other : c.best);
}

void SlotStoreChooser::record(SlotStores mode, size_t bytes, double seconds) {
  if (bytes == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  SizeClass& c = classes_[classOf(bytes)];
  const int m = static_cast<int>(mode);
  const double sample = seconds * 1e9 / static_cast<double>(bytes);
  double& est = c.ns_per_byte[m];
  // A trial replaces the stale figure of the other mode; the mode in use is smoothed.
  est = (est == 0.0 || m != c.best) ? sample : est + kSmoothing * (sample - est);
  if (m != c.best) {
    if (est < c.ns_per_byte[c.best]) {
      c.best = m;
      c.period = kFirstPeriod;
    } else if (c.period < kLastPeriod) {
      c.period *= 2;
    }
  } else if (c.ns_per_byte[1 - m] > 0.0 && est > c.ns_per_byte[1 - m]) {
    c.best = 1 - m;  // the mode in use got slower than the other's last figure: go back
    c.period = kFirstPeriod;
  }
}

}  // namespace perseus::collectives
