// Entry point of the shared-memory transport: connects the ranks of one host.
//
// Note [Shared-memory segments]
// Each local rank owns one POSIX shared-memory object, "/perseus-<job id>-<global rank>"
// (mode 0600), laid out as in shm_layout.h: a header (owner pid, "closed" flag, doorbell futex
// word), the arena barrier counters, the rings this rank RECEIVES on (one per other local
// rank) and its ShmArena slot. Start-up, run by every local rank in createShmLocalGroup():
//   1. create: the owner creates its object (O_EXCL; a stale name of the same job id is
//      replaced), reserves its pages (posix_fallocate), maps it pre-faulted (MAP_POPULATE),
//      initialises the header and publishes the magic number last;
//   2. local_barrier() — every object now exists;
//   3. map: the rank maps every peer's object (pre-faulted), validates layout and settings
//      (MismatchError when ranks disagree), and opens a pidfd on each owner's pid;
//   4. local_barrier() — every object is now mapped by every local rank;
//   5. unlink: the owner removes its own name. From here on nothing of the job is visible in
//      /dev/shm, and the memory is freed when the last process unmaps it (or dies), so a killed
//      job leaves nothing behind. Only a rank killed between 1 and 5 can leak its name; a job
//      started later with the same id replaces it, and the launcher may remove
//      /dev/shm/perseus-<job id>-* after a failed start.
// No mapping, name lookup or page fault happens after start-up. When a rank's group is
// destroyed it sets its "closed" flag and rings its peers, who then fail pending operations
// with PeerLostError; a rank that dies without closing is found through its pid.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/params.h"
#include "transport/channel.h"
#include "transport/channel_transport.h"
#include "transport/shm/shm_arena.h"

namespace perseus::transport::shm {

struct ShmLocalGroup {
  std::unique_ptr<ShmArena> arena;
  // One channel per other rank of this host, by global rank (no entry for this rank).
  std::map<int, std::unique_ptr<Channel>> channels;
  // Rung by the channels above; pass it to ChannelTransport so that a waiting rank sleeps on a
  // futex instead of spinning and wakes within microseconds when data arrives.
  std::shared_ptr<Doorbell> doorbell;
};

// `global_ranks_of_host[i]` is the global rank of local rank i; `local_barrier` is a barrier
// among exactly these ranks (the store in production), called twice. Every local rank must
// call this with the same job id, ranks and settings. Throws InvalidArgumentError on bad
// arguments, MismatchError when local ranks disagree, InternalError when /dev/shm fails.
// On failure, this rank's name is unlinked before the exception leaves.
std::unique_ptr<ShmLocalGroup> createShmLocalGroup(const std::string& job_id, int local_rank,
                                                   const std::vector<int>& global_ranks_of_host,
                                                   const Params& params,
                                                   const std::function<void()>& local_barrier);

}  // namespace perseus::transport::shm
