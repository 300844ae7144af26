#include "engine/posted/post_ids.h"

namespace perseus::engine {

PostIds::PostIds() : ring_(std::make_unique<Place[]>(kRingSize)) {}

void PostIds::add(int64_t id, Posted posted) {
  Place& p = placeOf(id);
  if (p.id.load(std::memory_order_relaxed) != 0) {
    std::lock_guard<std::mutex> lock(overflow_mu_);
    overflow_[id] = posted;
    overflow_size_.store(overflow_.size(), std::memory_order_release);
    return;
  }
  // Release: a reader whose acquire load sees either value also sees this place's last
  // remove() when it re-reads the id, so it never takes them for the id it was looking for.
  // (No standalone fence: ThreadSanitizer does not model those.)
  p.slot.store(posted.slot | (posted.lent ? kLentBit : 0), std::memory_order_release);
  p.gen.store(posted.gen, std::memory_order_release);
  p.id.store(id, std::memory_order_release);
}

void PostIds::remove(int64_t id) {
  Place& p = placeOf(id);
  if (p.id.load(std::memory_order_relaxed) == id) {
    p.id.store(0, std::memory_order_relaxed);
    return;
  }
  std::lock_guard<std::mutex> lock(overflow_mu_);
  overflow_.erase(id);
  overflow_size_.store(overflow_.size(), std::memory_order_release);
}

bool PostIds::find(int64_t id, Posted* out) const {
  const Place& p = placeOf(id);
  if (p.id.load(std::memory_order_acquire) == id) {
    const uint64_t slot = p.slot.load(std::memory_order_acquire);
    const Posted seen{static_cast<size_t>(slot & ~kLentBit), p.gen.load(std::memory_order_acquire),
                      (slot & kLentBit) != 0};
    if (p.id.load(std::memory_order_relaxed) != id) return false;  // removed meanwhile
    *out = seen;
    return true;
  }
  if (overflow_size_.load(std::memory_order_acquire) == 0) return false;
  std::lock_guard<std::mutex> lock(overflow_mu_);
  auto it = overflow_.find(id);
  if (it == overflow_.end()) return false;
  *out = it->second;
  return true;
}

}  // namespace perseus::engine
