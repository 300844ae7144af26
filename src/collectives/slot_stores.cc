#include "collectives/slot_stores.h"

#include <cstring>

#include "common/logging.h"
#include "kernels/reduce.h"

namespace perseus::collectives {
namespace {
// Weight of a new sample in the running time per byte of the mode in use.
constexpr double kSmoothing = 0.3;
// A mode takes over only when it is this much faster: near-equal figures are noise.
constexpr double kMargin = 0.9;
}  // namespace

SlotStoreChooser& SlotStoreChooser::instance() {
  static SlotStoreChooser chooser;
  return chooser;
}

SlotStoreChooser::SizeClass& SlotStoreChooser::classOf(Collective kind, size_t bytes) {
  int c = 0;
  for (size_t b = bytes / (4 * kChosenBytes); b > 0 && c < kClasses - 1; b >>= 2) ++c;
  return classes_[static_cast<int>(kind) % kKinds][c];
}

SlotStores SlotStoreChooser::pick(const std::string& setting, Collective kind, size_t bytes) {
  if (setting == "streaming") return SlotStores::kStreaming;
  if (!measures(setting, bytes)) return SlotStores::kCached;
  std::lock_guard<std::mutex> lock(mu_);
  SizeClass& c = classOf(kind, bytes);
  const int other = 1 - c.best;
  const bool trial = c.ns_per_byte[c.best] > 0.0 &&
                     (c.ns_per_byte[other] == 0.0 || ++c.since_trial >= c.period);
  if (trial) c.since_trial = 0;
  return static_cast<SlotStores>(trial ? other : c.best);
}

void SlotStoreChooser::record(SlotStores mode, Collective kind, size_t bytes, double seconds) {
  if (bytes < kChosenBytes) return;
  std::lock_guard<std::mutex> lock(mu_);
  SizeClass& c = classOf(kind, bytes);
  const int m = static_cast<int>(mode);
  const double sample = seconds * 1e9 / static_cast<double>(bytes);
  double& est = c.ns_per_byte[m];
  // A trial replaces the stale figure of the other mode; the mode in use is smoothed.
  est = (est == 0.0 || m != c.best) ? sample : est + kSmoothing * (sample - est);
  const int before = c.best;
  if (m != c.best) {
    if (est < kMargin * c.ns_per_byte[c.best]) {
      c.best = m;
      c.period = kFirstPeriod;
    } else if (c.period < kLastPeriod) {
      c.period *= 2;
    }
  } else if (c.ns_per_byte[1 - m] > 0.0 && kMargin * est > c.ns_per_byte[1 - m]) {
    c.best = 1 - m;  // the mode in use got slower than the other's last figure: go back
    c.period = kFirstPeriod;
  }
  if (c.best != before) {
    PERSEUS_LOG(DEBUG, kCollectives)
        << collectiveName(kind) << " of " << bytes << " bytes: slot stores now "
        << (c.best == 0 ? "cached" : "streaming") << " (ns/byte cached " << c.ns_per_byte[0]
        << ", streaming " << c.ns_per_byte[1] << ")";
  }
}

SlotWriter::SlotWriter(const std::string& setting, Collective kind, size_t bytes)
    : mode_(SlotStoreChooser::instance().pick(setting, kind, bytes)),
      timed_(SlotStoreChooser::measures(setting, bytes)),
      kind_(kind),
      bytes_(bytes) {}

void SlotWriter::copy(void* slot, const void* src, size_t len) const {
  if (streaming()) kernels::copyNonTemporal(slot, src, len);
  else std::memcpy(slot, src, len);
}

void SlotWriter::publish() const {
  if (streaming()) kernels::nonTemporalFence();
}

void SlotWriter::startClock() {
  if (timed_) start_ = std::chrono::steady_clock::now();
}

void SlotWriter::finished() {
  if (!timed_) return;
  SlotStoreChooser::instance().record(
      mode_, kind_, bytes_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
}

}  // namespace perseus::collectives
