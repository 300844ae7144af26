// The post board's protocol (collectives/post_board.h) over plain memory, ranks as threads: a
// generation completes when every rank posted it, revoking freezes the count so that every
// rank agrees on which generations completed, and the two pools per rank are never rewritten
// while a rank may still read them.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "collectives/from_posts.h"
#include "collectives/post_board.h"

namespace perseus::collectives {
namespace {

struct Memory {
  explicit Memory(int n, size_t slots = 4, size_t pool_bytes = 256)
      : states(slots),
        pool_bytes(pool_bytes),
        pools(static_cast<size_t>(n) * 2 * pool_bytes),
        flags(static_cast<size_t>(n) * 2) {
    for (auto& s : states) s.store(0);
    for (auto& f : flags) f.store(0);
  }
  PostBoard board(int rank) {
    const int n = static_cast<int>(flags.size() / 2);
    std::vector<std::array<unsigned char*, 2>> p;
    std::vector<std::atomic<uint64_t>*> l, c;
    for (int r = 0; r < n; ++r) {
      unsigned char* base = pools.data() + static_cast<size_t>(r) * 2 * pool_bytes;
      p.push_back({base, base + pool_bytes});
      l.push_back(&flags[static_cast<size_t>(r) * 2]);
      c.push_back(&flags[static_cast<size_t>(r) * 2 + 1]);
    }
    return PostBoard(states.data(), states.size(), p, pool_bytes, l, c, rank);
  }
  std::vector<std::atomic<uint64_t>> states;
  size_t pool_bytes;
  std::vector<unsigned char> pools;
  std::vector<std::atomic<uint64_t>> flags;
};

TEST(PostBoard, AGenerationCompletesWhenEveryRankPosted) {
  Memory m(3);
  PostBoard b0 = m.board(0), b1 = m.board(1), b2 = m.board(2);
  EXPECT_TRUE(b0.publish(1));
  EXPECT_TRUE(b1.publish(1));
  EXPECT_EQ(b0.state(1, 1), PostBoard::State::kWaiting);
  EXPECT_EQ(b0.state(0, 1), PostBoard::State::kWaiting);  // other slots untouched
  EXPECT_TRUE(b2.publish(1));
  EXPECT_EQ(b1.state(1, 1), PostBoard::State::kComplete);
  // A rank that moved on to generation 2 leaves generation 1 complete for the others.
  EXPECT_TRUE(b0.publish(1));
  EXPECT_EQ(b2.state(1, 1), PostBoard::State::kComplete);
  EXPECT_EQ(b2.state(1, 2), PostBoard::State::kWaiting);
}

TEST(PostBoard, RevokingFreezesWhatCompleted) {
  Memory m(2);
  PostBoard b0 = m.board(0), b1 = m.board(1);
  ASSERT_TRUE(b0.publish(0));
  ASSERT_TRUE(b1.publish(0));  // generation 1 complete
  ASSERT_TRUE(b0.publish(0));  // rank 0 posts generation 2
  // Rank 1 gives up on generation 2 before posting it.
  EXPECT_EQ(b1.revoke(0, 2), PostBoard::State::kRevoked);
  EXPECT_EQ(b0.state(0, 2), PostBoard::State::kRevoked);
  EXPECT_EQ(b0.state(0, 1), PostBoard::State::kComplete);
  // A late post does not count: generation 2 can never complete.
  EXPECT_FALSE(b1.publish(0));
  EXPECT_EQ(b0.state(0, 2), PostBoard::State::kRevoked);
  // Revoking a completed generation reports it complete.
  EXPECT_EQ(b0.revoke(0, 1), PostBoard::State::kComplete);
}

TEST(PostBoard, ListeningFlagsAndPostCountsAreSeenByEveryRank) {
  Memory m(2);
  PostBoard b0 = m.board(0), b1 = m.board(1);
  EXPECT_FALSE(b1.listening(0));
  b0.setListening(true);
  EXPECT_TRUE(b1.listening(0));
  b0.setListening(false);
  EXPECT_FALSE(b1.listening(0));
  EXPECT_EQ(b1.othersPosts(), 0u);
  ASSERT_TRUE(b0.publish(0));
  ASSERT_TRUE(b0.publish(1));
  EXPECT_EQ(b1.othersPosts(), 2u);
  EXPECT_EQ(b0.othersPosts(), 0u);
}

// Ranks as threads post and reduce many generations of one slot with the double-buffered
// pools; a revocation races with the posts at a random point. Every rank must see the same
// sums for the generations it completed and agree on where the slot stopped.
TEST(PostBoard, ConcurrentGenerationsAndARacingRevocationAgree) {
  for (int n : {2, 3, 4}) {
    Memory m(n, 1, 64);
    constexpr uint64_t kGenerations = 20000;
    const uint64_t revoke_at = 5000 + static_cast<uint64_t>(n) * 1234;
    std::vector<uint64_t> last_complete(static_cast<size_t>(n), 0);
    std::vector<int> wrong(static_cast<size_t>(n), 0);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        PostBoard b = m.board(r);
        for (uint64_t g = 1; g <= kGenerations; ++g) {
          const uint64_t value = g * 10 + static_cast<uint64_t>(r);
          std::memcpy(b.payload(r, g, 0), &value, sizeof(value));
          if (r == n - 1 && g == revoke_at) {
            if (b.revoke(0, g) != PostBoard::State::kComplete) return;
          } else if (!b.publish(0)) {
            return;  // revoked before this post counted
          }
          PostBoard::State s;
          while ((s = b.state(0, g)) == PostBoard::State::kWaiting) std::this_thread::yield();
          if (s == PostBoard::State::kRevoked) return;
          uint64_t sum = 0;
          for (int q = 0; q < n; ++q) {
            uint64_t v;
            std::memcpy(&v, b.payload(q, g, 0), sizeof(v));
            sum += v;
          }
          const uint64_t want =
              g * 10 * static_cast<uint64_t>(n) + static_cast<uint64_t>(n * (n - 1) / 2);
          if (sum != want) ++wrong[static_cast<size_t>(r)];
          last_complete[static_cast<size_t>(r)] = g;
        }
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(wrong[static_cast<size_t>(r)], 0) << "n=" << n << " rank " << r;
      EXPECT_EQ(last_complete[static_cast<size_t>(r)], revoke_at - 1) << "n=" << n << " rank " << r;
    }
  }
}

// finishFromPosts (collectives/from_posts.h) reads a generation's posts where they lie: each
// rank's pool of that generation's parity, at the slot's offset.
TEST(PostBoard, APostedCollectiveFinishesFromTheGenerationsPosts) {
  Memory m(3);
  PostBoard b0 = m.board(0), b1 = m.board(1);
  const uint64_t gen = 3;  // odd: the second pool
  for (int r = 0; r < 3; ++r) {
    const float v[2] = {float(r + 1), float(10 * (r + 1))};
    std::memcpy(b0.payload(r, gen, 64), v, sizeof(v));
  }
  FromPosts sum;
  sum.offset = 64;
  sum.count = 2;
  sum.postscale = 0.5;
  float out[2] = {};
  finishFromPosts(b1, nullptr, gen, sum, nullptr, out);
  EXPECT_EQ(out[0], 3.0f);
  EXPECT_EQ(out[1], 30.0f);

  FromPosts gather;
  gather.kind = FromPosts::Kind::kGather;
  gather.offset = 64;
  gather.piece_bytes = {4, 0, 8};  // rank 1 contributes no rows
  float rows[3] = {};
  const float row0 = 1;  // a rank's own rows come from its input
  finishFromPosts(b0, nullptr, gen, gather, &row0, rows);
  EXPECT_EQ(rows[0], 1.0f);
  EXPECT_EQ(rows[1], 3.0f);
  EXPECT_EQ(rows[2], 30.0f);

  FromPosts root2;
  root2.kind = FromPosts::Kind::kCopyRoot;
  root2.offset = 64;
  root2.root = 2;
  root2.bytes = 8;
  float got[2] = {};
  finishFromPosts(b1, nullptr, gen, root2, nullptr, got);
  EXPECT_EQ(got[0], 3.0f);
  const float own[2] = {7, 8};  // the root itself reads its own input, not its post
  float mine[2] = {};
  root2.root = 0;
  finishFromPosts(b0, nullptr, gen, root2, own, mine);
  EXPECT_EQ(mine[1], 8.0f);
}

}  // namespace
}  // namespace perseus::collectives
