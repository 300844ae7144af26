#include "rendezvous/launch_env.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <map>

#include "common/status.h"

namespace perseus::rendezvous {
namespace {

const char* lookupNonEmpty(const EnvLookup& lookup, const char* name) {
  const char* v = lookup(name);
  return (v != nullptr && *v != '\0') ? v : nullptr;
}

int parseInt(const char* name, const char* text, int min_value, int max_value) {
  errno = 0;
  char* end = nullptr;
  long v = std::strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < min_value || v > max_value) {
    throw InvalidArgumentError(PERSEUS_STR(name << "='" << text << "' is not an integer in "
                                                << min_value << ".." << max_value
                                                << "; the launcher sets it, check the job script"));
  }
  return static_cast<int>(v);
}

std::string localHostname() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

// Reads a (rank, size) pair that must come together.
bool readPair(const EnvLookup& lookup, const char* rank_var, const char* size_var, int* rank,
              int* size) {
  const char* r = lookupNonEmpty(lookup, rank_var);
  const char* s = lookupNonEmpty(lookup, size_var);
  if (r == nullptr && s == nullptr) return false;
  if (r == nullptr || s == nullptr) {
    throw InvalidArgumentError(PERSEUS_STR((r == nullptr ? rank_var : size_var)
                                           << " is missing while " << (r == nullptr ? size_var : rank_var)
                                           << " is set; set both or neither"));
  }
  *size = parseInt(size_var, s, 1, INT_MAX);
  *rank = parseInt(rank_var, r, 0, *size - 1);
  return true;
}

}  // namespace

LaunchInfo readLaunchInfo(const EnvLookup& lookup) {
  LaunchInfo info;
  Topology& t = info.topology;
  const char* prefix = nullptr;
  if (readPair(lookup, "PERSEUS_RANK", "PERSEUS_SIZE", &t.rank, &t.size)) {
    info.launcher = Launcher::kPerseus;
    prefix = "PERSEUS_";
  } else if (readPair(lookup, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", &t.rank, &t.size)) {
    info.launcher = Launcher::kOpenMpi;
    prefix = "OMPI_COMM_WORLD_";
    if (const char* id = lookupNonEmpty(lookup, "OMPI_MCA_ess_base_jobid")) {
      info.ompi_job_id = id;
    } else if (const char* ns = lookupNonEmpty(lookup, "PMIX_NAMESPACE")) {
      info.ompi_job_id = ns;
    }
  }
  if (prefix != nullptr) {
    std::string lr = std::string(prefix) + "LOCAL_RANK", ls = std::string(prefix) + "LOCAL_SIZE";
    info.has_local = readPair(lookup, lr.c_str(), ls.c_str(), &t.local_rank, &t.local_size);
    if (info.has_local && t.local_size > t.size) {
      throw InvalidArgumentError(PERSEUS_STR(ls << "=" << t.local_size << " exceeds the job size "
                                                << t.size));
    }
  }
  if (info.launcher == Launcher::kPerseus) {
    info.has_cross = readPair(lookup, "PERSEUS_CROSS_RANK", "PERSEUS_CROSS_SIZE", &t.cross_rank,
                              &t.cross_size);
    if (info.has_cross && t.cross_size > t.size) {
      throw InvalidArgumentError(PERSEUS_STR("PERSEUS_CROSS_SIZE=" << t.cross_size
                                             << " exceeds the job size " << t.size));
    }
  }
  const char* host = lookupNonEmpty(lookup, "PERSEUS_HOSTNAME");
  t.hostname = host != nullptr ? host : localHostname();

  if (const char* addr = lookupNonEmpty(lookup, "PERSEUS_CONTROLLER_ADDR")) {
    info.controller_host = addr;
    const char* port = lookupNonEmpty(lookup, "PERSEUS_CONTROLLER_PORT");
    if (port == nullptr) {
      throw InvalidArgumentError(
          "PERSEUS_CONTROLLER_ADDR is set but PERSEUS_CONTROLLER_PORT is not; set both");
    }
    info.controller_port = parseInt("PERSEUS_CONTROLLER_PORT", port, 1, 65535);
  }
  if (const char* secret = lookupNonEmpty(lookup, "PERSEUS_SECRET")) info.secret_hex = secret;

  if (info.launcher == Launcher::kPerseus && t.size > 1) {
    if (info.controller_host.empty()) {
      throw InvalidArgumentError(
          "PERSEUS_SIZE > 1 but PERSEUS_CONTROLLER_ADDR is not set; start the job with "
          "perseusrun, or set PERSEUS_CONTROLLER_ADDR/_PORT to a running store server");
    }
  }
  if (!info.controller_host.empty() && info.secret_hex.empty()) {
    throw InvalidArgumentError(
        "PERSEUS_SECRET is not set; every connection is authenticated with the job secret "
        "(hex), which perseusrun sets for each rank");
  }
  return info;
}

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
  const char* prefix = info.launcher == Launcher::kOpenMpi ? "OMPI_COMM_WORLD_" : "PERSEUS_";
  auto check = [&](const char* name, int given_value, int derived) {
    if (given_value != derived) {
      throw InvalidArgumentError(PERSEUS_STR(
          prefix << name << "=" << given_value << " on rank " << t->rank << " (host '"
                 << t->hostname << "') disagrees with the " << derived
                 << " derived from the host names of all ranks; fix the launcher's placement "
                    "or set PERSEUS_HOSTNAME consistently"));
    }
  };
  if (info.has_local) {
    check("LOCAL_SIZE", given.local_size, t->local_size);
    check("LOCAL_RANK", given.local_rank, t->local_rank);
  }
  if (info.has_cross) {
    check("CROSS_SIZE", given.cross_size, t->cross_size);
    check("CROSS_RANK", given.cross_rank, t->cross_rank);
  }
}

}  // namespace perseus::rendezvous
