#include "engine/cycle/set_table.h"

#include <algorithm>
#include <numeric>

#include "collectives/collectives.h"
#include "common/logging.h"

namespace perseus::engine {

ProcessSetTable::ProcessSetTable(const rendezvous::Topology& topology,
                                 transport::Transport* transport, transport::ShmArena* arena,
                                 const Params& params, Listener listener)
    : transport_(transport), arena_(arena), params_(params), listener_(std::move(listener)) {
  PERSEUS_CHECK(transport_ != nullptr, "engine without a transport");
  const int rank = transport_->rank();
  std::vector<int> all(static_cast<size_t>(transport_->size()));
  std::iota(all.begin(), all.end(), 0);
  // Without rendezvous information (tests, one host) every rank is local.
  std::vector<int> local = topology.local_ranks.empty() ? all : topology.local_ranks;
  std::vector<int> cross =
      topology.cross_ranks.empty() ? std::vector<int>{rank} : topology.cross_ranks;
  insert(kGlobalSetId, kGlobalGroup, std::move(all));
  insert(kLocalSetId, kLocalGroup, std::move(local));
  insert(kCrossSetId, kCrossGroup, std::move(cross));
}

ProcessSet& ProcessSetTable::insert(int32_t id, int group, std::vector<int> members) {
  auto set = std::make_unique<ProcessSet>(
      id, group, std::move(members), transport_->rank(),
      static_cast<size_t>(std::max<int64_t>(params_.cache_capacity, 0)));
  if (set->member()) {
    set->comm = std::make_unique<collectives::Communicator>(transport_, arena_, set->members,
                                                            set->group_id, params_);
  }
  if (listener_.set_added) listener_.set_added(ProcessSetInfo{id, set->members, set->rank});
  ProcessSet& out = *set;
  sets_[group] = std::move(set);
  return out;
}

ProcessSet* ProcessSetTable::byId(int32_t id) {
  for (auto& [group, set] : sets_) {
    if (set->id == id) return set.get();
  }
  return nullptr;
}

const ProcessSet* ProcessSetTable::byId(int32_t id) const {
  return const_cast<ProcessSetTable*>(this)->byId(id);
}

bool ProcessSetTable::pending() const {
  for (auto& [group, set] : sets_) {
    if (set->hasWork()) return true;
  }
  return false;
}

ProcessSet* ProcessSetTable::add(std::vector<int> members) {
  int group = -1;
  if (next_group_ < kMaxGroups) {
    group = next_group_++;
  } else if (!removed_groups_.empty()) {
    group = *removed_groups_.begin();
    removed_groups_.erase(removed_groups_.begin());
    collectives::reuseGroup(*sets_.at(kLocalGroup)->comm, group);
  } else {
    return nullptr;
  }
  return &insert(next_set_id_++, group, std::move(members));
}

bool ProcessSetTable::remove(int32_t id) {
  if (id < 1) return false;
  for (auto it = sets_.begin(); it != sets_.end(); ++it) {
    if (it->second->id != id) continue;
    if (listener_.set_removed) listener_.set_removed(id);
    removed_groups_.insert(it->first);
    sets_.erase(it);
    return true;
  }
  return false;
}

}  // namespace perseus::engine
