#include "engine/cycle/process_set.h"

#include <algorithm>

namespace perseus::engine {
namespace {
// Enough for a step's worth of small calls in flight; beyond it, nodes are freed.
constexpr size_t kKeptNodes = 256;

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

void ProcessSet::adopt(std::unique_ptr<Entry> e) {
  if (spare_nodes.empty()) {
    const std::string& name = e->request.name;
    entries.insert_or_assign(name, std::move(e));
    return;
  }
  EntryMap::node_type node = std::move(spare_nodes.back());
  spare_nodes.pop_back();
  node.key().assign(e->request.name);
  node.mapped() = std::move(e);
  EntryMap::insert_return_type inserted = entries.insert(std::move(node));
  if (inserted.inserted) return;
  inserted.position->second = std::move(inserted.node.mapped());
  spare_nodes.push_back(std::move(inserted.node));
}

std::unique_ptr<Entry> ProcessSet::take(const std::string& name) {
  EntryMap::node_type node = entries.extract(name);
  if (node.empty()) return nullptr;
  std::unique_ptr<Entry> e = std::move(node.mapped());
  if (spare_nodes.size() < kKeptNodes) spare_nodes.push_back(std::move(node));
  return e;
}

}  // namespace perseus::engine
