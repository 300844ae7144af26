// The online choice between cached and streaming slot stores (Note [Slot stores]): a policy
// test with made-up timings, since which mode wins depends on where the host put the cores.
#include <gtest/gtest.h>

#include "collectives/slot_stores.h"
#include "common/params.h"
#include "common/status.h"

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
  // The cached mode gets slower than streaming's last figure: back within a few calls.
  int calls = 0;
  while (call(c, streaming_wins) != SlotStores::kStreaming) ASSERT_LT(++calls, 10);
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

}  // namespace
}  // namespace perseus::collectives
