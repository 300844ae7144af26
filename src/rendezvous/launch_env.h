// What the launcher told this process, read from the environment (pure over a lookup function,
// so tests need no setenv). Three launchers are recognised, in this order:
//   1. perseusrun: PERSEUS_RANK/SIZE (+ LOCAL_*, CROSS_*, HOSTNAME, CONTROLLER_ADDR/PORT, SECRET);
//   2. Open MPI's mpirun: OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE (PERSEUS_CONTROLLER_*
//      and PERSEUS_SECRET still win if set);
//   3. nothing: a single rank.
#pragma once

#include <functional>
#include <string>

#include "rendezvous/world.h"

namespace perseus::rendezvous {

enum class Launcher { kSingle, kPerseus, kOpenMpi };

struct LaunchInfo {
  Launcher launcher = Launcher::kSingle;
  // rank/size always; local_*/cross_* only where has_local/has_cross; hostname always.
  Topology topology;
  bool has_local = false;
  bool has_cross = false;
  std::string controller_host;  // empty: no controller given
  int controller_port = 0;
  std::string secret_hex;
  std::string ompi_job_id;  // Open MPI only: OMPI_MCA_ess_base_jobid or PMIX_NAMESPACE
};

using EnvLookup = std::function<const char*(const char*)>;

// Throws InvalidArgumentError naming the variable that is missing, malformed or inconsistent.
LaunchInfo readLaunchInfo(const EnvLookup& lookup);

// Checks the local/cross placement given by the launcher against the one derived from host
// names (topology.hostnames, local_ranks, cross_ranks filled), naming the variable that
// disagrees. `topology` keeps the derived values.
void reconcilePlacement(const LaunchInfo& info, Topology* topology);

// Fills hostnames-derived fields of `topology` (local_ranks, cross_ranks, local_rank/size,
// cross_rank/size) from topology->hostnames. Hosts are ordered by their lowest rank.
void derivePlacement(Topology* topology);

}  // namespace perseus::rendezvous
