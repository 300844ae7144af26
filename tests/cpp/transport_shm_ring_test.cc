// ShmChannel rings driven directly: wraparound with odd sizes, full/empty edges, FIFO content.
#include <gtest/gtest.h>

#include <cstdint>
#include <thread>
#include <vector>

#include "common/status.h"
#include "support/forked_ranks.h"
#include "support/shared_barrier.h"
#include "support/shm_groups.h"

namespace perseus::transport::shm {
namespace {

using perseus::testing::createShmGroupsAsThreads;
using perseus::testing::shmNamesOf;
using perseus::testing::shmTestParams;
using perseus::testing::uniqueJobId;

uint8_t patternByte(uint64_t i) { return static_cast<uint8_t>((i * 131u + (i >> 8) * 7u) & 0xff); }

TEST(ShmRing, WraparoundWithOddSizes) {
  Params params = shmTestParams();
  params.shm_ring_bytes = 1021;  // prime: every chunk boundary lands somewhere new
  auto groups = createShmGroupsAsThreads(2, uniqueJobId("ring"), params);
  Channel& tx = *groups[0]->channels.at(1);
  Channel& rx = *groups[1]->channels.at(0);

  const size_t send_sizes[] = {1, 7, 13, 333, 1020, 1021, 1022, 4099};
  const size_t recv_sizes[] = {3, 1021, 17, 500, 1, 2048};
  const uint64_t total = 200000;
  uint64_t sent = 0, received = 0;
  size_t si = 0, ri = 0;
  std::vector<uint8_t> out(8192), in(8192);
  EXPECT_FALSE(rx.hasIncoming());
  while (received < total) {
    const size_t want_send = std::min<uint64_t>(send_sizes[si++ % 8], total - sent);
    for (size_t i = 0; i < want_send; ++i) out[i] = patternByte(sent + i);
    const size_t n = tx.trySend(out.data(), want_send);
    ASSERT_LE(n, want_send);
    ASSERT_LE(sent + n - received, 1021u) << "ring holds more than its capacity";
    sent += n;
    if (sent > received) {
      EXPECT_TRUE(rx.hasIncoming());
    }
    const size_t m = rx.tryRecv(in.data(), recv_sizes[ri++ % 6]);
    for (size_t i = 0; i < m; ++i)
      ASSERT_EQ(in[i], patternByte(received + i)) << "at byte " << received + i;
    received += m;
  }
  EXPECT_EQ(sent, total);
  EXPECT_FALSE(rx.hasIncoming());
  EXPECT_EQ(rx.tryRecv(in.data(), 1), 0u);
}

TEST(ShmRing, FullRingAcceptsNothingUntilDrained) {
  Params params = shmTestParams();
  params.shm_ring_bytes = 100;
  auto groups = createShmGroupsAsThreads(2, uniqueJobId("full"), params);
  Channel& tx = *groups[1]->channels.at(0);
  Channel& rx = *groups[0]->channels.at(1);
  std::vector<uint8_t> buf(300, 0xab), got(300);
  EXPECT_EQ(tx.trySend(buf.data(), 300), 100u);
  EXPECT_EQ(tx.trySend(buf.data(), 1), 0u);
  EXPECT_EQ(rx.tryRecv(got.data(), 30), 30u);
  EXPECT_EQ(tx.trySend(buf.data(), 300), 30u);
  EXPECT_EQ(rx.tryRecv(got.data(), 300), 100u);
  EXPECT_EQ(got[99], 0xab);
  EXPECT_FALSE(rx.hasIncoming());
  EXPECT_EQ(rx.pollFd(), -1);
  EXPECT_NO_THROW(rx.checkPeer());
}

TEST(ShmRing, BothDirectionsAreIndependent) {
  auto groups = createShmGroupsAsThreads(3, uniqueJobId("dirs"), shmTestParams());
  int a = 11, b = 22, c = 0;
  ASSERT_EQ(groups[0]->channels.at(2)->trySend(&a, sizeof a), sizeof a);
  ASSERT_EQ(groups[2]->channels.at(0)->trySend(&b, sizeof b), sizeof b);
  EXPECT_FALSE(groups[1]->channels.at(0)->hasIncoming());
  ASSERT_EQ(groups[2]->channels.at(0)->tryRecv(&c, sizeof c), sizeof c);
  EXPECT_EQ(c, 11);
  ASSERT_EQ(groups[0]->channels.at(2)->tryRecv(&c, sizeof c), sizeof c);
  EXPECT_EQ(c, 22);
}

TEST(ShmRing, ClosedPeerIsLostOnlyAfterItsBytesAreDrained) {
  auto groups = createShmGroupsAsThreads(2, uniqueJobId("close"), shmTestParams());
  int v = 7, got = 0;
  ASSERT_EQ(groups[1]->channels.at(0)->trySend(&v, sizeof v), sizeof v);
  std::unique_ptr<Channel> rx = std::move(groups[0]->channels.at(1));
  groups[1].reset();  // rank 1 shuts down after its last send
  EXPECT_EQ(rx->tryRecv(&got, 2 * sizeof got), sizeof got);  // blocked: wants more
  try {
    rx->checkPeer();
    FAIL() << "expected PeerLostError";
  } catch (const PeerLostError& e) {
    EXPECT_EQ(e.rank(), 1);
    EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
  }
}

TEST(ShmRing, AForkedChildOfARankDoesNotCloseIt) {
  auto groups = createShmGroupsAsThreads(2, uniqueJobId("forkchild"), shmTestParams());
  // Like a data-loader worker: inherits the mappings, runs destructors, exits.
  auto st = perseus::testing::runForked(
      1,
      [&](int) {
        groups[1].reset();
        return 0;
      },
      std::chrono::seconds(10));
  ASSERT_TRUE(st[0].ok()) << st[0].describe();
  EXPECT_NO_THROW(groups[0]->channels.at(1)->checkPeer());
  int v = 5, got = 0;
  ASSERT_EQ(groups[1]->channels.at(0)->trySend(&v, sizeof v), sizeof v);
  ASSERT_EQ(groups[0]->channels.at(1)->tryRecv(&got, sizeof got), sizeof got);
  EXPECT_EQ(got, 5);
}

TEST(ShmRing, NamesAreUnlinkedRightAfterStartUp) {
  const std::string job = uniqueJobId("names");
  auto groups = createShmGroupsAsThreads(3, job, shmTestParams());
  EXPECT_TRUE(shmNamesOf(job).empty());
  groups.clear();
  EXPECT_TRUE(shmNamesOf(job).empty());
}

TEST(ShmRing, MismatchedSettingsAreReported) {
  const std::string job = uniqueJobId("mismatch");
  perseus::testing::SharedBarrier barrier(2);
  std::vector<int> ranks = {0, 1};
  std::string errors[2];
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) {
    threads.emplace_back([&, i] {
      Params p = shmTestParams();
      p.shm_ring_bytes = i == 0 ? 4096 : 8192;
      try {
        createShmLocalGroup(job, i, ranks, p, [&] { barrier.wait(); });
      } catch (const MismatchError& e) {
        errors[i] = e.what();
      } catch (const Error&) {
        // The first rank to see the mismatch fails and unlinks its name, so the other may fail
        // to open it instead.
      }
    });
  }
  for (auto& t : threads) t.join();
  const std::string both = errors[0] + errors[1];
  EXPECT_NE(both.find("PERSEUS_SHM_RING_BYTES"), std::string::npos) << both;
  EXPECT_TRUE(shmNamesOf(job).empty());
}

TEST(ShmRing, BadArgumentsAreRejected) {
  Params p = shmTestParams();
  auto noop = [] {};
  EXPECT_THROW(createShmLocalGroup("", 0, {0}, p, noop), InvalidArgumentError);
  EXPECT_THROW(createShmLocalGroup("x", 2, {0, 1}, p, noop), InvalidArgumentError);
  EXPECT_THROW(createShmLocalGroup("x", 0, {3, 3}, p, noop), InvalidArgumentError);
  p.shm_ring_bytes = 8;
  EXPECT_THROW(createShmLocalGroup("x", 0, {0}, p, noop), InvalidArgumentError);
}

TEST(ShmRing, SingleRankGroupHasAnArenaAndNoChannels) {
  const std::string job = uniqueJobId("single");
  auto group = createShmLocalGroup(job, 0, {5}, shmTestParams(), [] {});
  EXPECT_TRUE(group->channels.empty());
  EXPECT_EQ(group->arena->localSize(), 1);
  EXPECT_EQ(group->arena->globalRanks(), std::vector<int>{5});
  group->arena->barrier(0, {0});
  EXPECT_TRUE(shmNamesOf(job).empty());
}

}  // namespace
}  // namespace perseus::transport::shm
