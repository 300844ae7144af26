#include "engine/cycle/process_set.h"

#include <algorithm>

namespace perseus::engine {
namespace {
int findRank(const std::vector<int>& members, int global_rank) {
  auto it = std::find(members.begin(), members.end(), global_rank);
  return it == members.end() ? -1 : static_cast<int>(it - members.begin());
}
}  // namespace

ProcessSet::ProcessSet(int32_t id_, int group_id_, std::vector<int> members_, int global_rank,
                       size_t cache_capacity)
    : id(id_),
      group_id(group_id_),
      members(std::move(members_)),
      rank(findRank(members, global_rank)),
      cache(cache_capacity) {
  if (rank == 0) coordinator = std::make_unique<Coordinator>(static_cast<int>(members.size()));
}

bool ProcessSet::hasWork() const {
  return !entries.empty() || (coordinator && coordinator->numWaiting() > 0);
}

}  // namespace perseus::engine
