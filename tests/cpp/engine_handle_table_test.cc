// The C API's handle table (engine/handle.h): ids in their ring places, ids whose place is
// taken in the overflow map, release exactly once, and threads that insert, find and release
// at once.
#include <gtest/gtest.h>

#include <memory>
#include <thread>
#include <vector>

#include "engine/handle.h"

namespace perseus::engine {
namespace {

std::shared_ptr<Handle> handleWithId(int64_t id) {
  return std::make_shared<Handle>(id,
                                  std::make_shared<const std::string>("t" + std::to_string(id)));
}

TEST(HandleTable, FindsWhatWasInsertedUntilReleased) {
  HandleTable table;
  auto h = Handle::create("a");
  table.insert(h);
  EXPECT_EQ(table.find(h->id()), h);
  EXPECT_EQ(table.size(), 1u);
  EXPECT_TRUE(table.release(h->id()));
  EXPECT_EQ(table.find(h->id()), nullptr);
  EXPECT_FALSE(table.release(h->id())) << "released twice";
  EXPECT_FALSE(table.release(0));
  EXPECT_EQ(table.find(0), nullptr);
  EXPECT_EQ(table.size(), 0u);
}

TEST(HandleTable, IdsSharingARingPlaceAreAllKept) {
  HandleTable table;
  // 4096 places: these ids share one, and a window of 10000 live ids wraps the ring twice.
  std::vector<std::shared_ptr<Handle>> hs;
  for (int64_t id : {int64_t{7}, int64_t{7} + 4096, int64_t{7} + 2 * 4096})
    hs.push_back(handleWithId(id));
  for (int64_t id = 100000; id < 110000; ++id) hs.push_back(handleWithId(id));
  for (const auto& h : hs) table.insert(h);
  EXPECT_EQ(table.size(), hs.size());
  for (const auto& h : hs) ASSERT_EQ(table.find(h->id()), h) << h->id();
  // Release the ring's holder first: the others stay found, and the place takes a new id.
  EXPECT_TRUE(table.release(7));
  EXPECT_EQ(table.find(7), nullptr);
  EXPECT_EQ(table.find(7 + 4096), hs[1]);
  auto fresh = handleWithId(7 + 3 * 4096);
  table.insert(fresh);
  EXPECT_EQ(table.find(7 + 3 * 4096), fresh);
  EXPECT_EQ(table.find(7 + 2 * 4096), hs[2]);
  for (size_t i = 1; i < hs.size(); ++i) ASSERT_TRUE(table.release(hs[i]->id())) << hs[i]->id();
  EXPECT_TRUE(table.release(fresh->id()));
  EXPECT_EQ(table.size(), 0u);
}

TEST(HandleTable, ThreadsInsertFindAndReleaseAtOnce) {
  HandleTable table;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20000; ++i) {
        auto h = Handle::create("x");
        table.insert(h);
        EXPECT_EQ(table.find(h->id()), h);
        EXPECT_TRUE(table.release(h->id()));
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(table.size(), 0u);
}

}  // namespace
}  // namespace perseus::engine
