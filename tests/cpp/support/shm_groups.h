// Test helpers for the shared-memory transport: start the shm groups of a one-host job with
// ranks as threads, and wrap a group into a ChannelTransport.
#pragma once

#include <memory>
#include <string>
#include <vector>

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
std::unique_ptr<transport::ChannelTransport> makeShmTransport(
    transport::shm::ShmLocalGroup& group, int rank, int size, const Params& params);

// Small and fast defaults for tests: short timeout, small rings and slots.
Params shmTestParams();

}  // namespace perseus::testing
