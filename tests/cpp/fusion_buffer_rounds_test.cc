// The GPU fusion buffer's rounds (fusion/buffer_rounds.h) are a pure function: tested here on any
// machine.
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "fusion/buffer_rounds.h"

namespace perseus::fusion {
namespace {

// Every element of every tensor lands exactly once, pieces are aligned, inside the capacity,
// and do not overlap.
void checkPlan(const std::vector<size_t>& counts, size_t elem, size_t capacity, size_t align) {
  auto rounds = planRounds(counts, elem, capacity, align);
  std::vector<size_t> covered(counts.size(), 0);
  for (const auto& r : rounds) {
    ASSERT_FALSE(r.pieces.empty());
    ASSERT_LE(r.count * elem, capacity);
    size_t end = 0;
    for (const auto& p : r.pieces) {
      EXPECT_EQ(p.buffer_offset * elem % align, 0u);
      EXPECT_GE(p.buffer_offset, end);
      end = p.buffer_offset + p.count;
      EXPECT_LE(end, r.count);
      EXPECT_EQ(p.offset, covered[p.tensor]) << "pieces of a tensor must come in order";
      covered[p.tensor] += p.count;
      EXPECT_GT(p.count, 0u);
    }
    EXPECT_EQ(end, r.count);
  }
  EXPECT_EQ(covered, counts);
}

TEST(GpuFusionPlan, SmallTensorsShareOneRound) {
  auto rounds = planRounds({1, 2, 3}, 4, 1 << 20, 64);
  ASSERT_EQ(rounds.size(), 1u);
  ASSERT_EQ(rounds[0].pieces.size(), 3u);
  EXPECT_EQ(rounds[0].pieces[1].buffer_offset, 16u);  // 64-byte aligned floats
  EXPECT_EQ(rounds[0].pieces[2].buffer_offset, 32u);
  EXPECT_EQ(rounds[0].count, 35u);
}

TEST(GpuFusionPlan, LargeTensorSpansRounds) {
  auto rounds = planRounds({1000}, 4, 1024, 64);  // 256 floats per round
  ASSERT_EQ(rounds.size(), 4u);
  EXPECT_EQ(rounds[3].pieces[0].offset, 768u);
  EXPECT_EQ(rounds[3].pieces[0].count, 232u);
}

TEST(GpuFusionPlan, EmptyTensorsAndBatches) {
  EXPECT_TRUE(planRounds({}, 4, 1024, 64).empty());
  EXPECT_TRUE(planRounds({0, 0}, 2, 1024, 64).empty());
  checkPlan({0, 5, 0, 7}, 2, 1024, 64);
}

TEST(GpuFusionPlan, RandomBatchesCoverEverything) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<size_t> counts(rng() % 20);
    for (auto& c : counts) c = rng() % 3000;
    const size_t elem = size_t{1} << (rng() % 4);
    const size_t align = 64 * (1 + rng() % 4);
    const size_t capacity = align * (1 + rng() % 64) + rng() % 64;
    checkPlan(counts, elem, capacity, align);
  }
}

}  // namespace
}  // namespace perseus::fusion
