// What a rank knows after start-up: where it sits in the job, and the transports that reach
// its peers. Engine and tests build Communicators from a World; nothing here is global.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/params.h"
#include "rendezvous/store.h"
#include "transport/shm/shm_arena.h"
#include "transport/transport.h"

namespace perseus::rendezvous {

struct Topology {
  int rank = 0, size = 1;
  int local_rank = 0, local_size = 1;
  int cross_rank = 0, cross_size = 1;
  std::string hostname;
  // Filled by rendezvous: every rank's host name, and the global ranks of this host (in
  // local-rank order) and of this rank's cross group (in cross-rank order).
  std::vector<std::string> hostnames;
  std::vector<int> local_ranks;
  std::vector<int> cross_ranks;
};

struct World {
  Topology topology;
  std::unique_ptr<Store> store;                     // nullptr for a single rank
  std::unique_ptr<transport::Transport> transport;  // reaches every global rank
  std::unique_ptr<transport::ShmArena> arena;       // the ranks of this host; nullptr if alone
};

// Reads the topology from the environment (PERSEUS_* as set by perseusrun, or another
// launcher's variables: Note [Launchers] in launch_env.cc; one rank when none is set),
// authenticates with the rendezvous store, exchanges addresses, and connects every pair:
// shared memory within a host, TCP across hosts (PERSEUS_CPU_OPERATIONS=tcp forces TCP).
// Throws InvalidArgumentError for inconsistent variables, TimeoutError when ranks don't
// arrive within PERSEUS_START_TIMEOUT.
std::unique_ptr<World> bootstrap(const Params& params);

}  // namespace perseus::rendezvous
