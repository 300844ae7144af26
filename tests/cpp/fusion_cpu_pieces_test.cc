// Note [Cache-sized pieces]: how a CPU allreduce group is cut.
#include <gtest/gtest.h>

#include "fusion/cpu_pieces.h"

namespace perseus::fusion {
namespace {

constexpr size_t KiB = 1024;

TEST(CpuPieces, SmallTensorsShareAPieceUpToItsSize) {
  // 40 tensors of 64 KiB: 2 MiB pieces hold 32 of them.
  std::vector<size_t> bytes(40, kCpuAloneBytes);
  auto pieces = planCpuPieces(bytes, true);
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_EQ(pieces[0].begin, 0u);
  EXPECT_EQ(pieces[0].end, 32u);
  EXPECT_EQ(pieces[0].bytes, kCpuPieceBytes);
  EXPECT_FALSE(pieces[0].alone);
  EXPECT_EQ(pieces[1].begin, 32u);
  EXPECT_EQ(pieces[1].end, 40u);
  EXPECT_EQ(pieces[1].bytes, 8 * kCpuAloneBytes);
}

TEST(CpuPieces, ALargeTensorRunsAloneAndSplitsTheSmallOnes) {
  auto pieces = planCpuPieces({4 * KiB, 4 * KiB, kCpuAloneBytes + 1, 4 * KiB}, true);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[0].end - pieces[0].begin, 2u);
  EXPECT_EQ(pieces[0].bytes, 8 * KiB);
  EXPECT_TRUE(pieces[1].alone);
  EXPECT_EQ(pieces[1].begin, 2u);
  EXPECT_EQ(pieces[1].end, 3u);
  EXPECT_FALSE(pieces[2].alone);
  EXPECT_EQ(pieces[2].begin, 3u);
}

TEST(CpuPieces, AGroupOfOneRunsAloneWhateverItsSize) {
  auto pieces = planCpuPieces({4}, false);
  ASSERT_EQ(pieces.size(), 1u);
  EXPECT_TRUE(pieces[0].alone);
}

TEST(CpuPieces, EmptyTensorsStillTakeTheirPlace) {
  // A zero-byte tensor's handle completes with its piece, so it is never dropped.
  auto pieces = planCpuPieces({0, 0, 8}, true);
  ASSERT_EQ(pieces.size(), 1u);
  EXPECT_EQ(pieces[0].end, 3u);
  EXPECT_EQ(pieces[0].bytes, 8u);
  EXPECT_TRUE(planCpuPieces({}, true).empty());
}

}  // namespace
}  // namespace perseus::fusion
