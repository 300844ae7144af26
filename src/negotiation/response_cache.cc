#include "negotiation/response_cache.h"

#include <algorithm>
#include <functional>

namespace perseus::engine {

ResponseCache::ResponseCache(size_t capacity) : capacity_(capacity) {}

ResponseCache::Result ResponseCache::lookup(const Request& request) const {
  if (capacity_ == 0 || !isCacheable(request.op)) return {};
  auto it = by_name_.find(request.name);
  if (it == by_name_.end()) return {};
  const Slot& slot = slots_[it->second];
  bool same = slot.own.has_value() && slot.own->sameMetadata(request);
  return {same ? Lookup::kHit : Lookup::kInvalid, it->second};
}

int ResponseCache::put(const Response& response, const Request* own) {
  if (capacity_ == 0 || response.is_error || !isCacheable(response.op)) return -1;
  auto it = by_name_.find(response.name);
  if (it != by_name_.end()) {
    Slot& slot = slots_[it->second];
    slot.response = response;
    slot.own = own ? std::optional<Request>(*own) : std::nullopt;
    touch(it->second);
    return -1;
  }
  int evicted = -1;
  if (by_name_.size() >= capacity_) {
    evicted = lru_.front();
    erase(evicted);
  }
  int bit;
  if (!free_bits_.empty()) {
    bit = free_bits_.back();
    free_bits_.pop_back();
  } else {
    bit = static_cast<int>(slots_.size());
    slots_.emplace_back();
  }
  Slot& slot = slots_[bit];
  slot.used = true;
  slot.response = response;
  slot.own = own ? std::optional<Request>(*own) : std::nullopt;
  slot.lru_pos = lru_.insert(lru_.end(), bit);
  by_name_[response.name] = bit;
  return evicted;
}

void ResponseCache::touch(int bit) {
  PERSEUS_CHECK(has(bit), "touch of unused cache bit " << bit);
  Slot& slot = slots_[bit];
  lru_.splice(lru_.end(), lru_, slot.lru_pos);
}

void ResponseCache::erase(int bit) {
  if (!has(bit)) return;
  Slot& slot = slots_[bit];
  by_name_.erase(slot.response.name);
  lru_.erase(slot.lru_pos);
  slot = Slot();
  free_bits_.push_back(bit);
  std::sort(free_bits_.begin(), free_bits_.end(), std::greater<int>());
}

const Response& ResponseCache::response(int bit) const {
  PERSEUS_CHECK(has(bit), "unused cache bit " << bit);
  return slots_[bit].response;
}

bool ResponseCache::has(int bit) const {
  return bit >= 0 && bit < static_cast<int>(slots_.size()) && slots_[bit].used;
}

}  // namespace perseus::engine
