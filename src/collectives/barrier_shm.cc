// Barrier through the arena's own barrier flags (no slot memory is touched).
#include "collectives/cost_model.h"
#include "collectives/registry.h"

namespace perseus::collectives {
namespace {

bool supports(const Communicator& comm, const CollectiveArgs&) { return comm.arena() != nullptr; }
double estimate(const Communicator&, const CollectiveArgs&) { return cost::kBarrierUs; }
void run(Communicator& comm, const CollectiveArgs&) {
  comm.arena()->barrier(comm.groupId(), comm.arenaMembers());
}

}  // namespace

extern const Algorithm kBarrierShm = {
    "shm",
    Collective::kBarrier,
    "the shared-memory arena's barrier; needs every member on this host",
    supports,
    estimate,
    run};

}  // namespace perseus::collectives
