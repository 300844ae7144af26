// The post lane's record of which slot and generation each pending handle was posted in
// (engine/posted/post_ids.h): found by id without a lock, never another post's place.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "engine/posted/post_ids.h"

namespace perseus::engine {
namespace {

TEST(PostIds, FindsWhatWasAddedUntilItIsRemoved) {
  PostIds ids;
  PostIds::Posted p;
  EXPECT_FALSE(ids.find(7, &p));
  ids.add(7, {3, 11});
  ASSERT_TRUE(ids.find(7, &p));
  EXPECT_EQ(p.slot, 3u);
  EXPECT_EQ(p.gen, 11u);
  ids.remove(7);
  EXPECT_FALSE(ids.find(7, &p));
}

TEST(PostIds, IdsThatShareAPlaceGoToTheOverflow) {
  PostIds ids;
  const int64_t a = 5, b = 5 + (int64_t{1} << 12), c = 5 + (int64_t{2} << 12);
  ids.add(a, {1, 1});
  ids.add(b, {2, 2});
  ids.add(c, {3, 3});
  PostIds::Posted p;
  ASSERT_TRUE(ids.find(b, &p));
  EXPECT_EQ(p.slot, 2u);
  ids.remove(a);
  ASSERT_TRUE(ids.find(c, &p));
  EXPECT_EQ(p.gen, 3u);
  EXPECT_FALSE(ids.find(a, &p));
  ids.remove(b);
  ids.remove(c);
  EXPECT_FALSE(ids.find(b, &p));
  EXPECT_FALSE(ids.find(c, &p));
}

// A reader looks an id up while its place is freed and taken by the next id (all of them share
// one place): it finds the id's own slot and generation or nothing, never the next post's.
TEST(PostIds, AReaderNeverSeesAnotherPostsPlace) {
  PostIds ids;
  constexpr int64_t kPosts = 200000;
  auto idOf = [](int64_t i) { return i * (int64_t{1} << 12) + 1; };
  std::atomic<int64_t> live{1};
  ids.add(idOf(1), {1, 3});
  std::thread reader([&] {
    PostIds::Posted p;
    for (int64_t i = 1; i < kPosts;) {
      i = live.load(std::memory_order_acquire);
      if (ids.find(idOf(i), &p)) {
        ASSERT_EQ(p.slot, static_cast<size_t>(i));
        ASSERT_EQ(p.gen, static_cast<uint64_t>(i) * 3);
      }
    }
  });
  for (int64_t i = 2; i <= kPosts; ++i) {
    ids.remove(idOf(i - 1));
    ids.add(idOf(i), {static_cast<size_t>(i), static_cast<uint64_t>(i) * 3});
    live.store(i, std::memory_order_release);
  }
  reader.join();
}

}  // namespace
}  // namespace perseus::engine
