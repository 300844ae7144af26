#include "transport/shm/cpu_budget.h"

#include <dirent.h>
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <tuple>
#include <utility>

namespace perseus::transport::shm {

namespace {

// Every thread of this process: sched_setaffinity binds one thread, and threads started
// before it (a framework's pools) would keep the old mask.
bool bindAllThreads(const cpu_set_t& set) {
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return sched_setaffinity(0, sizeof(set), &set) == 0;
  bool ok = true;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    const pid_t tid = static_cast<pid_t>(std::atoi(entry->d_name));
    // A thread that ended since the listing is no failure.
    if (sched_setaffinity(tid, sizeof(set), &set) != 0 && errno != ESRCH) ok = false;
  }
  closedir(dir);
  return ok;
}

int readTopology(int cpu, const char* field, int fallback) {
  const std::string path =
      "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/" + field;
  std::ifstream in(path);
  int v = fallback;
  return (in >> v) ? v : fallback;
}

CpuPlace sysfsPlace(int cpu) {
  // Unreadable: each CPU its own core, in id order.
  return CpuPlace{readTopology(cpu, "physical_package_id", 0), readTopology(cpu, "die_id", 0),
                  readTopology(cpu, "core_id", cpu)};
}

// Gives rank `r` a CPU of its mask, moving ranks that hold them to other CPUs of theirs where
// that frees one (an augmenting path); `tried` marks the CPUs this search has visited.
bool placeRank(const std::vector<std::vector<int>>& masks, int r, std::vector<int>& holder,
               std::vector<char>& tried) {
  for (int c : masks[r]) {
    if (tried[c]) continue;
    tried[c] = 1;
    if (holder[c] < 0 || placeRank(masks, holder[c], holder, tried)) {
      holder[c] = r;
      return true;
    }
  }
  return false;
}

// True when the ranks can each have a CPU of their own from their masks: a matching of ranks
// to distinct CPUs (Kuhn's algorithm). Where a rank finds a free CPU, as every unbound rank
// does, no search is needed.
bool cpuForEachRank(const std::vector<std::vector<int>>& masks, int max_cpu) {
  std::vector<int> holder(static_cast<size_t>(max_cpu) + 1, -1);
  std::vector<char> tried(holder.size());
  for (size_t r = 0; r < masks.size(); ++r) {
    const auto free =
        std::find_if(masks[r].begin(), masks[r].end(), [&](int c) { return holder[c] < 0; });
    if (free != masks[r].end()) {
      holder[*free] = static_cast<int>(r);
      continue;
    }
    std::fill(tried.begin(), tried.end(), 0);
    if (!placeRank(masks, static_cast<int>(r), holder, tried)) return false;
  }
  return true;
}

}  // namespace

std::vector<int> allowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

HostCpus hostCpus(std::vector<std::vector<int>> masks) {
  std::set<int> all;
  for (const auto& mask : masks) all.insert(mask.begin(), mask.end());
  for (auto& mask : masks) {
    if (mask.empty()) mask.assign(all.begin(), all.end());
  }
  HostCpus host;
  host.cpus = std::max(1, static_cast<int>(all.size()));
  host.oversubscribed =
      all.size() < masks.size() || !cpuForEachRank(masks, all.empty() ? 0 : *all.rbegin());
  return host;
}

std::vector<int> coreOrder(std::vector<int> cpus, CpuPlace (*place)(int cpu)) {
  if (place == nullptr) place = sysfsPlace;
  std::vector<std::pair<std::tuple<int, int, int, int>, int>> keyed;
  keyed.reserve(cpus.size());
  for (int c : cpus) {
    const CpuPlace p = place(c);
    keyed.push_back({{p.package, p.die, p.core, c}, c});
  }
  std::sort(keyed.begin(), keyed.end());
  for (size_t i = 0; i < keyed.size(); ++i) cpus[i] = keyed[i].second;
  return cpus;
}

int usableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  const int n = CPU_COUNT(&set);
  return n > 0 ? n : 1;
}

std::vector<int> bindToShare(int local_rank, int local_size) {
  const std::vector<int> cpus = coreOrder(allowedCpus());
  if (local_size < 2 || local_rank < 0 || local_rank >= local_size ||
      cpus.size() < static_cast<size_t>(local_size)) {
    return {};
  }
  const size_t per = cpus.size() / static_cast<size_t>(local_size);
  std::vector<int> share(cpus.begin() + static_cast<std::ptrdiff_t>(per * local_rank),
                         cpus.begin() + static_cast<std::ptrdiff_t>(per * (local_rank + 1)));
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : share) CPU_SET(c, &set);
  if (!bindAllThreads(set)) return {};
  return share;
}

}  // namespace perseus::transport::shm
