// Test helpers for the shared-memory transport: start the shm groups of a one-host job with
// ranks as threads, and wrap a group into a ChannelTransport.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "common/params.h"
#include "transport/channel_transport.h"
#include "transport/shm/shm_local_group.h"

namespace perseus::testing {

// Runs createShmLocalGroup for ranks 0..n-1 (global rank == local rank) on n threads.
// Rethrows the first exception a rank threw.
std::vector<std::unique_ptr<transport::shm::ShmLocalGroup>> createShmGroupsAsThreads(
    int n, const std::string& job_id, const Params& params);

// A ChannelTransport over `group`'s channels for a one-host job of `size` ranks. Takes the
// channels out of the group (the arena stays).
std::unique_ptr<transport::ChannelTransport> makeShmTransport(transport::shm::ShmLocalGroup& group,
                                                              int rank, int size,
                                                              const Params& params);

// Small and fast defaults for tests: short timeout, small rings and slots.
Params shmTestParams();

// Runs body(rank, comm) on one thread per rank of a one-host job of n ranks over the real
// shared-memory transport and arena, each with a Communicator of every rank (group 0). A rank
// whose body throws aborts its transport and arena, so the others fail instead of waiting.
// Returns each rank's error message ("" when it finished).
std::vector<std::string> runOnShmCommunicators(
    int n, const std::string& job_id, const Params& params,
    const std::function<void(int, collectives::Communicator&)>& body);

}  // namespace perseus::testing
