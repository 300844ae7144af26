#include "collectives/slot_stores.h"

#include <algorithm>
#include <cstring>

#include "common/logging.h"
#include "kernels/reduce.h"

namespace perseus::collectives {
namespace {
// A mode takes over only when it is this much faster: near-equal figures are noise.
constexpr double kMargin = 0.9;

double median3(const double (&v)[3]) {
  return std::max(std::min(v[0], v[1]), std::min(std::max(v[0], v[1]), v[2]));
}
}  // namespace

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
  const bool trial =
      c.ns_per_byte[c.best] > 0.0 && (c.ns_per_byte[other] == 0.0 || ++c.since_trial >= c.period);
  if (trial) c.since_trial = 0;
  return static_cast<SlotStores>(trial ? other : c.best);
}

SlotStoreChooser::Figures SlotStoreChooser::figures(Collective kind, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  const SizeClass& c = classOf(kind, bytes);
  return {{c.ns_per_byte[0], c.ns_per_byte[1]}, static_cast<SlotStores>(c.best)};
}

void SlotStoreChooser::record(SlotStores mode, Collective kind, size_t bytes, double seconds) {
  if (bytes < kChosenBytes) return;
  std::lock_guard<std::mutex> lock(mu_);
  SizeClass& c = classOf(kind, bytes);
  const int m = static_cast<int>(mode);
  const double sample = seconds * 1e9 / static_cast<double>(bytes);
  double& est = c.ns_per_byte[m];
  // A trial replaces the stale figure of the other mode. The mode in use takes the median of
  // its last three calls: a rank descheduled for a time slice makes one call 10-40x slower (a
  // 1 MiB allreduce: 0.3-2.2 ns/byte against 0.055), and such a call used to switch both ranks
  // to the slower mode until its next trial; a real change of placement shows in two calls.
  if (est == 0.0 || m != c.best) {
    for (double& v : c.recent[m]) v = sample;
  } else {
    c.recent[m][c.next[m]] = sample;
    c.next[m] = (c.next[m] + 1) % 3;
  }
  est = median3(c.recent[m]);
  const int before = c.best;
  if (m != c.best) {
    if (est < kMargin * c.ns_per_byte[c.best]) {
      c.best = m;
      c.period = kFirstPeriod;
      c.since_trial = 0;
    } else if (c.period < kLastPeriod) {
      c.period *= 2;
    }
  } else if (c.ns_per_byte[1 - m] > 0.0 && kMargin * est > c.ns_per_byte[1 - m]) {
    c.best = 1 - m;  // the mode in use got slower than the other's last figure: go back
    c.period = kFirstPeriod;
    c.since_trial = 0;  // the mode just left is retried a full period later, not at once
  }
  if (c.best != before) {
    PERSEUS_LOG(DEBUG, kCollectives)
        << collectiveName(kind) << " of " << bytes << " bytes: slot stores now "
        << (c.best == 0 ? "cached" : "streaming") << " (ns/byte cached " << c.ns_per_byte[0]
        << ", streaming " << c.ns_per_byte[1] << ")";
  }
}

SlotWriter::SlotWriter(Communicator& comm, Collective kind, size_t bytes)
    : SlotWriter(comm, kind, bytes, true) {}

SlotWriter SlotWriter::readerOnly(Communicator& comm, Collective kind, size_t bytes) {
  return SlotWriter(comm, kind, bytes, false);
}

SlotWriter::SlotWriter(Communicator& comm, Collective kind, size_t bytes, bool writes)
    : chooser_(comm.storeChooser()),
      mode_(writes ? chooser_.pick(comm.params().shm_stores, kind, bytes) : SlotStores::kCached),
      exchange_(SlotStoreChooser::measures(comm.params().shm_stores, bytes)),
      timed_(exchange_ && writes),
      kind_(kind),
      bytes_(bytes) {}

void SlotWriter::copy(void* slot, const void* src, size_t len) const {
  if (streaming())
    kernels::copyNonTemporal(slot, src, len);
  else
    std::memcpy(slot, src, len);
}

void SlotWriter::publish() const {
  if (streaming()) kernels::nonTemporalFence();
}

void SlotWriter::startClock() {
  if (timed_) start_ = std::chrono::steady_clock::now();
}

void SlotWriter::barrier(const detail::ArenaView& view, bool last) {
  if (!last || !exchange_) {
    view.barrier();
    return;
  }
  uint64_t mine = 0;
  if (timed_) {
    mine = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::steady_clock::now() - start_)
                                     .count());
  }
  const uint64_t slowest = view.barrierMax(mine);
  if (timed_) chooser_.record(mode_, kind_, bytes_, static_cast<double>(slowest) * 1e-9);
}

}  // namespace perseus::collectives
