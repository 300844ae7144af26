// Placement from the host names of all ranks: each rank's local and cross ranks, and the check
// that a launcher's own LOCAL_*/CROSS_* variables agree with them (launch_env.h).
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "rendezvous/launch_env.h"

namespace perseus::rendezvous {

void derivePlacement(Topology* t) {
  PERSEUS_CHECK(static_cast<int>(t->hostnames.size()) == t->size, "hostnames not filled");
  // Hosts in the order of their lowest rank; ranks of a host in rank order.
  std::vector<std::string> hosts;
  std::map<std::string, std::vector<int>> ranks_of;
  for (int r = 0; r < t->size; ++r) {
    auto& list = ranks_of[t->hostnames[r]];
    if (list.empty()) hosts.push_back(t->hostnames[r]);
    list.push_back(r);
  }
  t->local_ranks = ranks_of[t->hostnames[t->rank]];
  t->local_size = static_cast<int>(t->local_ranks.size());
  t->local_rank = static_cast<int>(
      std::find(t->local_ranks.begin(), t->local_ranks.end(), t->rank) - t->local_ranks.begin());
  t->cross_ranks.clear();
  for (const auto& h : hosts) {
    const auto& list = ranks_of[h];
    if (t->local_rank < static_cast<int>(list.size())) {
      if (list[t->local_rank] == t->rank) t->cross_rank = static_cast<int>(t->cross_ranks.size());
      t->cross_ranks.push_back(list[t->local_rank]);
    }
  }
  t->cross_size = static_cast<int>(t->cross_ranks.size());
}

void reconcilePlacement(const LaunchInfo& info, Topology* t) {
  const Topology& given = info.topology;
  auto check = [&](const std::string& name, int given_value, int derived) {
    if (given_value != derived) {
      throw InvalidArgumentError(PERSEUS_STR(
          name << "=" << given_value << " (from " << launcherName(info.launcher) << ") on rank "
               << t->rank << " (host '" << t->hostname << "') disagrees with the " << derived
               << " derived from the host names of all ranks; fix the launcher's placement "
                  "or set PERSEUS_HOSTNAME consistently"));
    }
  };
  if (info.has_local) {
    check(info.local_size_var, given.local_size, t->local_size);
    check(info.local_rank_var, given.local_rank, t->local_rank);
  }
  if (info.has_cross) {
    check(info.cross_size_var, given.cross_size, t->cross_size);
    check(info.cross_rank_var, given.cross_rank, t->cross_rank);
  }
}

}  // namespace perseus::rendezvous
