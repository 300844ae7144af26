// What the launcher told this process, read from the environment (pure over a lookup function,
// so tests need no setenv). See Note [Launchers] in launch_env.cc for the launchers recognised,
// their order, and where each one's store comes from.
#pragma once

#include <functional>
#include <string>

#include "rendezvous/world.h"

namespace perseus::rendezvous {

enum class Launcher { kSingle, kPerseus, kOpenMpi, kHydra, kTorchrun, kHorovodrun, kSlurm };

// "perseusrun", "Open MPI's mpirun", "MPICH's (or Intel MPI's) mpiexec", "torchrun",
// "horovodrun", "Slurm's srun".
const char* launcherName(Launcher launcher);

struct LaunchInfo {
  Launcher launcher = Launcher::kSingle;
  // rank/size always; local_*/cross_* only where has_local/has_cross; hostname always.
  Topology topology;
  bool has_local = false;
  bool has_cross = false;
  std::string local_rank_var, local_size_var;  // the variables has_local came from
  std::string cross_rank_var, cross_size_var;  // the variables has_cross came from
  std::string controller_host;                 // empty: no controller given
  int controller_port = 0;
  std::string secret_hex;
  std::string ompi_job_id;  // Open MPI only: OMPI_MCA_ess_base_jobid or PMIX_NAMESPACE
  int pmi_fd = -1;          // Hydra only: PMI_FD
  // torchrun and Slurm name a host but no store: rank 0 serves one on `store_host` at
  // PERSEUS_PORT, or at the first free port from `derived_port` on (torchrun: MASTER_PORT+1;
  // Slurm: from the job and step ids; Note [Derived store port] in store_from_env.cc).
  // `launch_id` tells this job's store from another one found at the same address.
  std::string store_host;
  int derived_port = 0;
  std::string launch_id;
  // horovodrun (Gloo mode) only: its HTTP rendezvous server is at store_host:http_port, and
  // rank 0 hands out its own store through it (Note [horovodrun rendezvous]).
  int http_port = 0;
  // The launcher's variables as this process saw them ("NAME=value, ..."), for messages.
  std::string seen;
  // Set when variables announce several processes that no launcher Perseus joins started
  // (a Slurm batch script, bare PMI_RANK/PMI_SIZE): bootstrap logs it once; the rank runs alone.
  std::string warning;
};

using EnvLookup = std::function<const char*(const char*)>;

// Throws InvalidArgumentError naming the launcher, the variable that is missing, malformed or
// inconsistent, and what to set.
LaunchInfo readLaunchInfo(const EnvLookup& lookup);

// Checks the local/cross placement given by the launcher against the one derived from host
// names (topology.hostnames, local_ranks, cross_ranks filled), naming the variable that
// disagrees. `topology` keeps the derived values.
void reconcilePlacement(const LaunchInfo& info, Topology* topology);

// Fills hostnames-derived fields of `topology` (local_ranks, cross_ranks, local_rank/size,
// cross_rank/size) from topology->hostnames. Hosts are ordered by their lowest rank.
void derivePlacement(Topology* topology);

}  // namespace perseus::rendezvous
