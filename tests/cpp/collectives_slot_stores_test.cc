// The online choice between cached and streaming slot stores (Note [Slot stores]): a policy
// test with made-up timings, since which mode wins depends on where the host put the cores.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "collectives/collectives.h"
#include "collectives/slot_stores.h"
#include "common/params.h"
#include "common/status.h"
#include "support/shared_barrier.h"
#include "support/shm_groups.h"

namespace perseus::collectives {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

// Runs one call: picks a mode and reports `seconds_per_mib[mode]` for it.
SlotStores call(SlotStoreChooser& c, const double (&seconds_per_mib)[2], size_t bytes = kMiB) {
  SlotStores m = c.pick("auto", Collective::kAllreduce, bytes);
  c.record(m, Collective::kAllreduce, bytes, seconds_per_mib[static_cast<int>(m)] * bytes / kMiB);
  return m;
}

TEST(SlotStores, FixedSettingsAreObeyed) {
  SlotStoreChooser c;
  EXPECT_EQ(c.pick("cached", Collective::kAllreduce, kMiB), SlotStores::kCached);
  EXPECT_EQ(c.pick("streaming", Collective::kAllreduce, kMiB), SlotStores::kStreaming);
  auto with = [](const char* value) {
    return Params::fromEnvironment([value](const char* name) {
      return std::string(name) == "PERSEUS_SHM_STORES" ? value : nullptr;
    });
  };
  EXPECT_EQ(with("streaming").shm_stores, "streaming");
  EXPECT_THROW(with("fast"), InvalidArgumentError);
}

TEST(SlotStores, TriesBothThenKeepsTheFasterAndRetriesRarely) {
  SlotStoreChooser c;
  const double streaming_wins[2] = {4e-4, 1e-4};
  EXPECT_EQ(call(c, streaming_wins), SlotStores::kCached);     // first figure
  EXPECT_EQ(call(c, streaming_wins), SlotStores::kStreaming);  // the other one, once
  int cached = 0;
  for (int i = 0; i < 1000; ++i) cached += call(c, streaming_wins) == SlotStores::kCached;
  // Retries back off from every 8th call to every 256th: 8+16+...+256 covers ~500 calls.
  EXPECT_GE(cached, 5);
  EXPECT_LE(cached, 10);
}

TEST(SlotStores, FollowsAChangeOfPlacement) {
  SlotStoreChooser c;
  const double cached_wins[2] = {1e-4, 2e-4}, streaming_wins[2] = {5e-4, 1.5e-4};
  for (int i = 0; i < 2000; ++i) call(c, cached_wins);  // long settled: retries every 256
  // The cached mode gets slower than streaming's last figure: back within two calls.
  int calls = 0;
  while (call(c, streaming_wins) != SlotStores::kStreaming) ASSERT_LT(++calls, 3);
  // From here on only retries use cached: every 8th call, then every 16th...
  int retries = 0;
  for (int i = 0; i < 20; ++i) retries += call(c, streaming_wins) == SlotStores::kCached;
  EXPECT_LE(retries, 2);
  // And the other way: streaming's own figure stays better than cached's stale one, so only a
  // retry finds that cached is fast again, within the first period after the switch.
  calls = 0;
  while (call(c, cached_wins) != SlotStores::kCached) ASSERT_LT(++calls, 300);
  retries = 0;
  for (int i = 0; i < 20; ++i) retries += call(c, cached_wins) == SlotStores::kStreaming;
  EXPECT_LE(retries, 2);
}

TEST(SlotStores, OneDescheduledCallDoesNotFlipTheChoice) {
  SlotStoreChooser c;
  const double cached_wins[2] = {1e-4, 2e-4}, preempted[2] = {3e-3, 2e-4};
  for (int i = 0; i < 100; ++i) call(c, cached_wins);
  call(c, preempted);  // 30x: a rank lost its core for a time slice
  int streaming = 0;
  for (int i = 0; i < 8; ++i) streaming += call(c, cached_wins) == SlotStores::kStreaming;
  EXPECT_LE(streaming, 1);  // at most the scheduled retry
}

TEST(SlotStores, SmallCallsStayCachedAndCollectivesChooseApart) {
  SlotStoreChooser c;
  const double streaming_wins[2] = {4e-4, 1e-4};
  for (int i = 0; i < 20; ++i) EXPECT_EQ(call(c, streaming_wins, 1024), SlotStores::kCached);
  for (int i = 0; i < 20; ++i) call(c, streaming_wins);
  EXPECT_EQ(c.pick("auto", Collective::kAllreduce, kMiB), SlotStores::kStreaming);
  EXPECT_EQ(c.pick("auto", Collective::kBroadcast, kMiB), SlotStores::kCached);  // unmeasured
}

TEST(SlotStores, SizeClassesChooseApart) {
  SlotStoreChooser c;
  const double cached_wins[2] = {1e-4, 3e-4}, streaming_wins[2] = {3e-4, 1e-4};
  for (int i = 0; i < 50; ++i) {
    call(c, cached_wins, 256 * 1024);
    call(c, streaming_wins, 64 * kMiB);
  }
  EXPECT_EQ(c.pick("auto", Collective::kAllreduce, 256 * 1024), SlotStores::kCached);
  EXPECT_EQ(c.pick("auto", Collective::kAllreduce, 64 * kMiB), SlotStores::kStreaming);
}

// The members of a communicator time each call by its slowest member (the last barrier carries
// the times), so their choosers hold the same figures and pick the same mode for every call.
TEST(SlotStores, MembersOfACommunicatorChooseAlike) {
  const int n = 2;
  Params params = testing::shmTestParams();
  params.shm_stores = "auto";
  params.allreduce_algo = "shm";   // the slot pipeline, whatever the host's cores
  const size_t count = 64 * 1024;  // 256 KiB of float32: pipelined, measured
  std::vector<std::vector<double>> seen(n);
  auto errors = testing::runOnShmCommunicators(
      n, testing::uniqueJobId("stores"), params, [&](int r, Communicator& comm) {
        std::vector<float> in(count, 1.f + r), out(count);
        for (int i = 0; i < 200; ++i) {
          if (r == 1 && i % 7 == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
          allreduce(comm, in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum);
          if (out[count - 1] != 3.f) throw std::runtime_error("wrong sum");
          SlotStoreChooser::Figures f =
              comm.storeChooser().figures(Collective::kAllreduce, count * sizeof(float));
          seen[r].insert(seen[r].end(),
                         {f.ns_per_byte[0], f.ns_per_byte[1], static_cast<double>(f.best)});
        }
      });
  for (int r = 0; r < n; ++r) ASSERT_EQ(errors[r], "") << "rank " << r;
  ASSERT_EQ(seen[0].size(), seen[1].size());
  EXPECT_GT(seen[0][0], 0.0);  // measured
  EXPECT_EQ(std::memcmp(seen[0].data(), seen[1].data(), seen[0].size() * sizeof(double)), 0)
      << "the ranks' choosers drifted apart";
}

}  // namespace
}  // namespace perseus::collectives
