// collectives/from_posts.h: finishing a posted collective from every rank's post.
#include <gtest/gtest.h>

#include <vector>

#include "collectives/from_posts.h"

namespace perseus::collectives {
namespace {

TEST(FromPosts, ReduceInRankOrderThenScale) {
  std::vector<float> a{1, 2, 3}, b{10, 20, 30}, c{100, 200, 300}, out(3);
  const void* posts[] = {a.data(), b.data(), c.data()};
  reduceFromPosts(out.data(), posts, 3, 3, DataType::kFloat32, ReduceOp::kSum, 0.5);
  EXPECT_EQ(out, (std::vector<float>{55.5f, 111, 166.5f}));
  reduceFromPosts(out.data(), posts, 3, 3, DataType::kFloat32, ReduceOp::kMax, 1.0);
  EXPECT_EQ(out, c);
}

TEST(FromPosts, GatherConcatenatesEveryRanksRows) {
  std::vector<int32_t> a{1}, b{}, c{3, 4}, out(3);
  const void* posts[] = {a.data(), b.data(), c.data()};
  const size_t bytes[] = {4, 0, 8};
  gatherFromPosts(out.data(), posts, bytes, 3);
  EXPECT_EQ(out, (std::vector<int32_t>{1, 3, 4}));
}

TEST(FromPosts, CopyFromTheRootsPostMayAlias) {
  std::vector<double> root{1.5, 2.5}, out(2);
  copyFromPost(out.data(), root.data(), 16);
  EXPECT_EQ(out, root);
  copyFromPost(root.data(), root.data(), 16);  // the root's own buffer: nothing to do
  EXPECT_EQ(root, (std::vector<double>{1.5, 2.5}));
}

}  // namespace
}  // namespace perseus::collectives
