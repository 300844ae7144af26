// A rank that stops because it lost a peer publishes that peer (Cycle::breakEngine ->
// ShmArena::recordLostPeer): local ranks that then see it go name the rank lost first, not
// the survivor that left after raising (a cascade). Ranks as threads over real shared memory.
#include <gtest/gtest.h>

#include "common/status.h"
#include "support/shared_barrier.h"
#include "support/shm_groups.h"

namespace perseus {
namespace {

using testing::createShmGroupsAsThreads;
using testing::shmTestParams;
using testing::uniqueJobId;

PeerLostError barrierError(transport::ShmArena& arena, std::vector<int> members) {
  try {
    arena.barrier(0, members);
  } catch (const PeerLostError& e) {
    return e;
  }
  ADD_FAILURE() << "the barrier did not throw PeerLostError";
  return PeerLostError(-2, "");
}

TEST(EngineLostRank, CascadeNamesTheRankLostFirst) {
  auto groups = createShmGroupsAsThreads(3, uniqueJobId("cascade"), shmTestParams());
  // Rank 1 lost rank 2 and leaves; rank 0 only ever waits for rank 1.
  groups[1]->arena->recordLostPeer(
      2, "rank 2 (local rank 2 on this host) exited (pid 4242: killed or crashed)");
  groups[1].reset();
  PeerLostError e = barrierError(*groups[0]->arena, {0, 1});
  EXPECT_EQ(e.rank(), 2) << e.what();
  const std::string msg = e.what();
  EXPECT_NE(msg.find("rank 2 was lost first"), std::string::npos) << msg;
  EXPECT_NE(msg.find("pid 4242"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rank 1 (local rank 1"), std::string::npos) << msg;
}

TEST(EngineLostRank, PlainDepartureNamesTheRankThatLeft) {
  auto groups = createShmGroupsAsThreads(2, uniqueJobId("plainlost"), shmTestParams());
  groups[1].reset();
  PeerLostError e = barrierError(*groups[0]->arena, {0, 1});
  EXPECT_EQ(e.rank(), 1) << e.what();
}

}  // namespace
}  // namespace perseus
