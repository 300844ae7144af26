// Submissions (engine/submissions.h): the claims, the queue and the stop, as the engine and
// the framework threads use them.
#include <gtest/gtest.h>

#include <thread>

#include "engine/submissions.h"

namespace perseus::engine {
namespace {

std::unique_ptr<Entry> entry(const std::string& name, int32_t set = 0) {
  auto e = std::make_unique<Entry>();
  e->request.name = name;
  e->request.process_set = set;
  return e;
}

using Admission = Submissions::Admission;

TEST(Submissions, ANameInFlightIsADuplicateUntilReleased) {
  Submissions s;
  Submissions::Stop stop;
  auto a = entry("grad"), b = entry("grad"), other_set = entry("grad", 1);
  EXPECT_EQ(s.submit(a, true, &stop), Admission::kQueued);
  EXPECT_EQ(a, nullptr);  // the queue's now
  EXPECT_EQ(s.submit(b, true, &stop), Admission::kDuplicate);
  ASSERT_NE(b, nullptr);                                            // untouched
  EXPECT_EQ(s.submit(other_set, true, &stop), Admission::kQueued);  // names are per set
  s.release(0, "grad");
  EXPECT_EQ(s.submit(b, true, &stop), Admission::kQueued);
}

TEST(Submissions, DrainReturnsTheQueueInOrder) {
  Submissions s;
  Submissions::Stop stop;
  EXPECT_FALSE(s.hasQueued());
  for (const char* n : {"a", "b", "c"}) {
    auto e = entry(n);
    ASSERT_EQ(s.submit(e, true, &stop), Admission::kQueued);
  }
  EXPECT_TRUE(s.hasQueued());
  auto batch = s.drain();
  ASSERT_EQ(batch.size(), 3u);
  EXPECT_EQ(batch[0]->request.name, "a");
  EXPECT_EQ(batch[2]->request.name, "c");
  EXPECT_FALSE(s.hasQueued());
  EXPECT_TRUE(s.drain().empty());
}

TEST(Submissions, AClaimAloneIsQueuedLaterOrReleased) {
  Submissions s;
  Submissions::Stop stop;
  auto e = entry("x");
  ASSERT_EQ(s.submit(e, false, &stop), Admission::kClaimed);
  ASSERT_NE(e, nullptr);
  EXPECT_FALSE(s.hasQueued());
  auto again = entry("x");
  EXPECT_EQ(s.submit(again, true, &stop), Admission::kDuplicate);
  EXPECT_EQ(s.queue(e, false, &stop), Admission::kQueued);
  EXPECT_TRUE(s.hasQueued());
}

TEST(Submissions, AFallingBackPostClaimsItsNameAndTheLaterSubmissionLoses) {
  Submissions s;
  Submissions::Stop stop;
  auto other = entry("p");
  ASSERT_EQ(s.submit(other, true, &stop), Admission::kQueued);
  auto post = entry("p");
  EXPECT_EQ(s.queue(post, true, &stop), Admission::kDuplicate);
  ASSERT_NE(post, nullptr);
}

TEST(Submissions, StopKeepsTheFirstCauseReturnsTheQueueAndRefusesMore) {
  Submissions s;
  Submissions::Stop stop;
  auto q = entry("queued"), claimed = entry("claimed");
  ASSERT_EQ(s.submit(q, true, &stop), Admission::kQueued);
  ASSERT_EQ(s.submit(claimed, false, &stop), Admission::kClaimed);
  auto queued = s.stop(StatusCode::kPeerLost, "rank 1 lost");
  s.stop(StatusCode::kShutDown, "later");
  ASSERT_EQ(queued.size(), 1u);
  EXPECT_EQ(queued[0]->request.name, "queued");
  EXPECT_EQ(s.stopCause().code, StatusCode::kPeerLost);
  EXPECT_EQ(s.stopCause().message, "rank 1 lost");
  auto late = entry("late");
  EXPECT_EQ(s.submit(late, true, &stop), Admission::kStopped);
  EXPECT_EQ(stop.message, "rank 1 lost");
  EXPECT_EQ(s.queue(claimed, false, &stop), Admission::kStopped);
  EXPECT_NE(claimed, nullptr);  // the caller fails it
  EXPECT_FALSE(s.hasQueued());
}

TEST(Submissions, ThreadsClaimEachNameOnce) {
  Submissions s;
  std::atomic<int> queued{0}, duplicates{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        Submissions::Stop stop;
        auto e = entry("n" + std::to_string(i));
        (s.submit(e, true, &stop) == Admission::kQueued ? queued : duplicates)++;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(queued.load(), 200);
  EXPECT_EQ(duplicates.load(), 600);
  EXPECT_EQ(s.drain().size(), 200u);
}

}  // namespace
}  // namespace perseus::engine
