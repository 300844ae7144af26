#include "transport/shm/shm_local_group.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <set>

#include "common/logging.h"
#include "common/reduce_threads.h"
#include "common/status.h"
#include "transport/shm/shm_arena_impl.h"
#include "transport/shm/shm_channel.h"
#include "transport/shm/shm_doorbell.h"
#include "transport/shm/shm_segment_set.h"

namespace perseus::transport::shm {
namespace {

constexpr int64_t kMinRingBytes = 64;

void validate(const std::string& job_id, int local_rank, const std::vector<int>& ranks,
              const Params& params) {
  if (job_id.empty()) {
    throw InvalidArgumentError(
        "createShmLocalGroup: the job id is empty; it names the "
        "shared-memory segments and must be unique per job");
  }
  if (local_rank < 0 || local_rank >= static_cast<int>(ranks.size())) {
    throw InvalidArgumentError(PERSEUS_STR("createShmLocalGroup: local rank "
                                           << local_rank << " is outside 0.." << ranks.size() - 1));
  }
  if (std::set<int>(ranks.begin(), ranks.end()).size() != ranks.size()) {
    throw InvalidArgumentError("createShmLocalGroup: the global ranks of this host repeat a rank");
  }
  if (params.shm_ring_bytes < kMinRingBytes) {
    throw InvalidArgumentError(PERSEUS_STR(
        "PERSEUS_SHM_RING_BYTES=" << params.shm_ring_bytes << " is too small; use at least "
                                  << kMinRingBytes << " (default 4194304)"));
  }
  if (params.shm_slot_bytes < 0) {
    throw InvalidArgumentError(
        PERSEUS_STR("PERSEUS_SHM_SLOT_BYTES=" << params.shm_slot_bytes << " is negative"));
  }
}

// Note [Slot for reduce threads]: the shm allreduce pipelines through kPipelineBuffers of the
// slot, each thread wanting a 256 KiB share of a segment (common/reduce_threads.h), and the
// slot's end holds the per-group small-message lines (collectives/arena_view.h). So the slot
// grows past PERSEUS_SHM_SLOT_BYTES to fit the threads that auto (or a forced count) would
// use. It is computed from the host's online CPUs, not this process's affinity mask, so that
// every rank of the host gets the same size (ShmSegmentSet checks that they agree).
size_t slotBytes(const Params& params, int local_size) {
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  const int threads = reduce_threads::requestedReduceThreads(
      params.reduce_threads, static_cast<int>(std::max(1L, online)), local_size);
  constexpr size_t kLinesBytes = size_t{ShmArena::kMaxGroups} * 2 * 64;
  const size_t wanted =
      reduce_threads::kPipelineBuffers * reduce_threads::segmentBytes(threads, SIZE_MAX) +
      kLinesBytes;
  const size_t set = static_cast<size_t>(params.shm_slot_bytes);
  return threads > 1 ? std::max(set, wanted) : set;
}

}  // namespace

std::unique_ptr<ShmLocalGroup> createShmLocalGroup(const std::string& job_id, int local_rank,
                                                   const std::vector<int>& global_ranks_of_host,
                                                   const Params& params,
                                                   const std::function<void()>& local_barrier) {
  validate(job_id, local_rank, global_ranks_of_host, params);
  // Note [Shared-memory segments], steps 1-5. If anything throws, ~ShmSegmentSet unlinks our
  // name and marks us closed, so peers still in start-up fail instead of waiting.
  auto set = std::make_shared<ShmSegmentSet>(
      job_id, local_rank, global_ranks_of_host, static_cast<size_t>(params.shm_ring_bytes),
      slotBytes(params, static_cast<int>(global_ranks_of_host.size())));
  local_barrier();
  set->mapPeers();
  local_barrier();
  set->unlinkOwn();

  auto group = std::make_unique<ShmLocalGroup>();
  auto doorbell = std::make_shared<ShmDoorbell>(set);
  group->doorbell = doorbell;
  group->arena = std::make_unique<ShmArenaImpl>(set, doorbell, params);
  for (int lr = 0; lr < set->localSize(); ++lr) {
    if (lr != local_rank)
      group->channels[global_ranks_of_host[lr]] = std::make_unique<ShmChannel>(set, lr);
  }
  const HostCpus& cpus = doorbell->hostCpus();
  PERSEUS_LOG(DEBUG, kTransport) << "shared memory connected: local rank " << local_rank << " of "
                                 << set->localSize() << ", " << set->layout().total_bytes
                                 << " bytes per segment; the local ranks run on " << cpus.cpus
                                 << " CPUs, "
                                 << (cpus.oversubscribed
                                         ? "too few to give each its own: waiters yield when idle"
                                         : "enough for one each: waiters spin");
  return group;
}

}  // namespace perseus::transport::shm
