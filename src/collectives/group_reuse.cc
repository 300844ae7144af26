// Handing a group id over to a new member list (Note [Reused group ids] in collectives.h).
#include <algorithm>

#include "collectives/arena_view.h"
#include "collectives/collectives.h"

namespace perseus::collectives {

void reuseGroup(Communicator& host, int group_id) {
  transport::ShmArena* arena = host.arena();
  if (arena == nullptr) return;  // no shared memory: nothing of the group is kept
  PERSEUS_CHECK(host.groupId() != group_id &&
                    static_cast<int>(host.arenaMembers().size()) == arena->localSize(),
                "reuseGroup needs a communicator of every local rank, under another group");
  detail::ArenaView view(host);
  arena->continueBarriersFrom(group_id, view.barrierMax(arena->barriers(group_id)));
  if (!detail::ArenaView::hasLines(*arena)) return;
  const int me = arena->localRank();
  uint64_t seq = 0;
  for (int parity : {0, 1}) {
    const detail::SmallLine* line = detail::groupLine(*arena, me, group_id, parity);
    seq = std::max(seq, line->seq.load(std::memory_order_relaxed));
  }
  seq = view.barrierMax(seq);
  // The group's next barrier publishes them, before any member reads a line of the group.
  for (int parity : {0, 1}) {
    detail::groupLine(*arena, me, group_id, parity)->seq.store(seq, std::memory_order_relaxed);
  }
}

}  // namespace perseus::collectives
