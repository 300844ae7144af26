#include "negotiation/set_conflict.h"

#include <algorithm>
#include <sstream>

namespace perseus::engine {
namespace {

bool contains(const std::vector<int>* members, int rank) {
  return members != nullptr && std::find(members->begin(), members->end(), rank) != members->end();
}

}  // namespace

std::string SetConflictCheck::describe(int32_t set_id, const std::set<int>& ranks) const {
  std::ostringstream os;
  os << (ranks.size() == 1 ? "rank " : "ranks [");
  const char* sep = "";
  for (int r : ranks) {
    os << sep << r;
    sep = ", ";
  }
  os << (ranks.size() == 1 ? "" : "]") << " submitted it on process set " << set_id;
  if (set_id == 0) os << " (global)";
  if (const std::vector<int>* m = members_of_(set_id)) {
    os << " of ranks [";
    for (size_t i = 0; i < m->size(); ++i) os << (i ? ", " : "") << (*m)[i];
    os << "]";
  }
  return os.str();
}

void SetConflictCheck::add(int rank, const Request& request) {
  const std::string& name = request.name;
  const int32_t set_id = request.process_set;
  auto& by_set = table_[name];
  Pending& mine = by_set[set_id];
  mine.op = request.op;
  mine.ranks.insert(rank);
  const std::vector<int>* my_members = members_of_(set_id);
  for (const auto& [other_id, other] : by_set) {
    if (other_id == set_id) continue;
    const std::vector<int>* other_members = members_of_(other_id);
    // We wait for rank `o` on our set, it waits for us on its set: neither can complete.
    const bool i_am_awaited = contains(other_members, rank) && other.ranks.count(rank) == 0;
    int awaited = -1;
    for (int o : other.ranks) {
      if (contains(my_members, o) && mine.ranks.count(o) == 0) {
        awaited = o;
        break;
      }
    }
    if (!i_am_awaited || awaited < 0) continue;
    Response r;
    r.op = request.op;
    r.name = name;
    r.is_error = true;
    r.error_code = StatusCode::kMismatch;
    r.cross_set = true;
    // Every member of either set: one that has not submitted the name yet fails it when it
    // does (Engine::conflicted_names_), instead of waiting for ranks that moved on.
    std::set<int> members;
    for (const std::vector<int>* m : {my_members, other_members}) {
      if (m != nullptr) members.insert(m->begin(), m->end());
    }
    r.set_ranks.assign(members.begin(), members.end());
    r.error_message = PERSEUS_STR(
        "Mismatched process sets for "
        << opTypeName(request.op) << " '" << name << "': " << describe(set_id, mine.ranks)
        << ", but " << describe(other_id, other.ranks)
        << "; each set waits for a rank that submitted the name on the other set, so neither "
           "can complete. Submit a name on the same process set on every rank (or give the "
           "two collectives different names).");
    conflicts_.push_back(std::move(r));
    table_.erase(name);
    return;
  }
  // Every member submitted it on this set: it completes there, nothing left to conflict with.
  if (my_members != nullptr && mine.ranks.size() >= my_members->size()) {
    by_set.erase(set_id);
    if (by_set.empty()) table_.erase(name);
  }
}

std::vector<Response> SetConflictCheck::takeConflicts() {
  std::vector<Response> out;
  out.swap(conflicts_);
  return out;
}

}  // namespace perseus::engine
