#include "engine/cycle/cross_set_names.h"

#include <algorithm>

#include "common/logging.h"

namespace perseus::engine {

std::vector<Request> CrossSetNames::announce() {
  std::vector<Request> out;
  for (auto& [group, set] : sets_) {
    // LOCAL and CROSS (negative ids) have other members on other hosts: the check, which
    // sees only global rank 0's view of a set, would misjudge them.
    if (group == kGlobalGroup || !set->member() || set->id < 0) continue;
    for (Entry* e : set->fresh) {
      if (e->announced) continue;
      e->announced = true;
      // A cache hit was negotiated in this set before: reporting it would cost every step.
      if (set->cache.lookup(e->request).state == ResponseCache::Lookup::kHit) continue;
      out.push_back(e->request);
    }
    // A cache hit that stalled went back to negotiation (its bit invalidated on every member,
    // set_negotiator.cc): reported now, so that a name cached here and submitted on another
    // set by some rank fails as a conflict after PERSEUS_STALL_WARNING instead of stalling on.
    for (Entry* e : set->uncached) {
      if (e->announced) continue;
      e->announced = true;
      out.push_back(e->request);
    }
  }
  return out;
}

std::vector<Request> CrossSetNames::check(const ProcessSet& set, int set_rank,
                                          std::vector<Request> list) {
  if (set.group_id != kGlobalGroup) return list;
  if (!check_) {
    check_ = std::make_unique<SetConflictCheck>([this](int32_t id) -> const std::vector<int>* {
      const ProcessSet* s = sets_.byId(id);
      return s == nullptr ? nullptr : &s->members;
    });
  }
  std::vector<Request> own;
  for (Request& q : list) {
    check_->add(set.members[static_cast<size_t>(set_rank)], q);
    if (q.process_set == set.id) own.push_back(std::move(q));
  }
  return own;
}

std::vector<Response> CrossSetNames::takeConflicts() {
  return check_ ? check_->takeConflicts() : std::vector<Response>{};
}

void CrossSetNames::failConflicts(std::vector<Response>* responses) {
  auto first = std::stable_partition(responses->begin(), responses->end(),
                                     [](const Response& r) { return !r.cross_set; });
  for (auto it = first; it != responses->end(); ++it) {
    const Response& r = *it;
    PERSEUS_LOG(WARNING, kEngine) << r.error_message;
    bool in_flight = false;
    for (auto& [group, set] : sets_) {
      if (!set->member()) continue;
      // A stale copy may wait in this set's coordinator (sent in an earlier cycle).
      if (set->coordinator) set->coordinator->erase(r.name);
      auto found = set->entries.find(r.name);
      if (found == set->entries.end()) continue;
      Entry* e = found->second.get();
      in_flight = true;
      auto drop = [e](std::vector<Entry*>& v) {
        v.erase(std::remove(v.begin(), v.end(), e), v.end());
      };
      drop(set->fresh);
      drop(set->uncached);
      fail_(*set, e, StatusCode::kMismatch, failure(e->request, set->id, r.error_message));
    }
    if (!in_flight &&
        std::find(r.set_ranks.begin(), r.set_ranks.end(), rank_) != r.set_ranks.end()) {
      conflicted_names_[r.name] = r.error_message;
    }
  }
  responses->erase(first, responses->end());
}

std::string CrossSetNames::failure(const Request& q, int32_t set_id,
                                   const std::string& cause) const {
  return PERSEUS_STR(opTypeName(q.op) << " '" << q.name << "' in process set " << set_id
                                      << " on rank " << rank_ << ": " << cause);
}

std::optional<std::string> CrossSetNames::takeConflict(const ProcessSet& set, const Request& q) {
  auto found = conflicted_names_.find(q.name);
  if (found == conflicted_names_.end()) return std::nullopt;
  std::string message = failure(q, set.id, found->second);
  conflicted_names_.erase(found);
  return message;
}

}  // namespace perseus::engine
