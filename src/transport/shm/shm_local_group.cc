#include "transport/shm/shm_local_group.h"

#include <set>

#include "common/logging.h"
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
    throw InvalidArgumentError("createShmLocalGroup: the job id is empty; it names the "
                               "shared-memory segments and must be unique per job");
  }
  if (local_rank < 0 || local_rank >= static_cast<int>(ranks.size())) {
    throw InvalidArgumentError(PERSEUS_STR("createShmLocalGroup: local rank " << local_rank
                                           << " is outside 0.." << ranks.size() - 1));
  }
  if (std::set<int>(ranks.begin(), ranks.end()).size() != ranks.size()) {
    throw InvalidArgumentError("createShmLocalGroup: the global ranks of this host repeat a rank");
  }
  if (params.shm_ring_bytes < kMinRingBytes) {
    throw InvalidArgumentError(PERSEUS_STR("PERSEUS_SHM_RING_BYTES=" << params.shm_ring_bytes
                                           << " is too small; use at least " << kMinRingBytes
                                           << " (default 4194304)"));
  }
  if (params.shm_slot_bytes < 0) {
    throw InvalidArgumentError(PERSEUS_STR("PERSEUS_SHM_SLOT_BYTES=" << params.shm_slot_bytes
                                           << " is negative"));
  }
}

}  // namespace

std::unique_ptr<ShmLocalGroup> createShmLocalGroup(const std::string& job_id, int local_rank,
                                                   const std::vector<int>& global_ranks_of_host,
                                                   const Params& params,
                                                   const std::function<void()>& local_barrier) {
  validate(job_id, local_rank, global_ranks_of_host, params);
  // Note [Shared-memory segments], steps 1-5. If anything throws, ~ShmSegmentSet unlinks our
  // name and marks us closed, so peers still in start-up fail instead of waiting.
  auto set = std::make_shared<ShmSegmentSet>(job_id, local_rank, global_ranks_of_host,
                                             static_cast<size_t>(params.shm_ring_bytes),
                                             static_cast<size_t>(params.shm_slot_bytes));
  local_barrier();
  set->mapPeers();
  local_barrier();
  set->unlinkOwn();

  auto group = std::make_unique<ShmLocalGroup>();
  auto doorbell = std::make_shared<ShmDoorbell>(set);
  group->doorbell = doorbell;
  group->arena = std::make_unique<ShmArenaImpl>(set, doorbell, params);
  for (int lr = 0; lr < set->localSize(); ++lr) {
    if (lr != local_rank) group->channels[global_ranks_of_host[lr]] = std::make_unique<ShmChannel>(set, lr);
  }
  PERSEUS_LOG(DEBUG, kTransport) << "shared memory connected: local rank " << local_rank << " of "
                                 << set->localSize() << ", " << set->layout().total_bytes
                                 << " bytes per segment";
  return group;
}

}  // namespace perseus::transport::shm
