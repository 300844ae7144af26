// Posted broadcasts and allgathers by address (Note [Posts by address] in
// engine/posted/posted_collectives.h), ranks as forked processes of a job through the C API: the
// right bytes at 2 and 3 ranks with uneven allgather pieces, a rank that overwrites its input as
// soon as its call returns while the peers still get what it posted, the fall-back when one rank
// does not read the others' memory (PERSEUS_SHM_SINGLE_COPY=0 there), a mismatch of a name
// posted by address, reported by name, and a reader that dies or stalls after the generation's
// posts completed: the lender's handle fails within PERSEUS_TIMEOUT, naming it and the tensor.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "perseus/c_api.h"
#include "support/capi_job.h"

namespace {

using perseus::testing::cpuTensor;
using perseus::testing::runCapiJob;

// Rank r's element i in iteration k: every rank can check every other's.
float valueOf(int r, int k, size_t i) {
  return static_cast<float>(r * 100000 + k * 1000) + static_cast<float>(i % 997);
}

// 16 KiB per rank fits the pools but goes by address; 256 KiB is by address or not posted.
constexpr int64_t kRowFloats = 64;
const int64_t kRowsPerRank[] = {64, 1024};

// One allgather of `rows` + r rows, opened (as torch's) or asynchronous, then every rank's
// rows checked; the input is overwritten at once after the call returns. 0, or 1 on a
// difference.
int allgatherOnce(int r, int n, int k, int64_t rows, bool opened) {
  int64_t shape[2] = {rows + r, kRowFloats};
  std::vector<float> in(static_cast<size_t>(shape[0] * kRowFloats));
  for (size_t i = 0; i < in.size(); ++i) in[i] = valueOf(r, k, i);
  perseus_tensor t = cpuTensor(in.data(), PERSEUS_FLOAT32, 2, shape);
  const std::string name = "ag." + std::to_string(rows);
  std::vector<float> out;
  perseus_handle h = 0;
  perseus_opened o{};
  int64_t result_shape[PERSEUS_MAX_NDIM];
  int32_t ndim = 2;
  if (opened && perseus_open_allgather(name.c_str(), &t, result_shape, &ndim, &o) == PERSEUS_OK &&
      o.open == 1) {
    out.assign(static_cast<size_t>(result_shape[0] * kRowFloats), -1.0f);
    CHILD_CHECK(perseus_finish_opened(&o, out.data(), &h) == PERSEUS_OK);
  } else {
    CHILD_CHECK(perseus_allgather(name.c_str(), &t, 0, &h) == PERSEUS_OK);
  }
  if (h != 0) {
    CHILD_CHECK(perseus_wait(h, 20) == PERSEUS_OK);
    perseus_tensor result{};
    CHILD_CHECK(perseus_handle_output(h, 0, &result) == PERSEUS_OK);
    const auto* p = static_cast<const float*>(result.data);
    out.assign(p, p + result.shape[0] * kRowFloats);
    perseus_release(h);
  }
  std::fill(in.begin(), in.end(), -7.0f);  // the caller's buffer again
  size_t at = 0;
  for (int q = 0; q < n; ++q) {
    const size_t count = static_cast<size_t>((rows + q) * kRowFloats);
    CHILD_CHECK(out.size() >= at + count);
    for (size_t i = 0; i < count; ++i) CHILD_CHECK(out[at + i] == valueOf(q, k, i));
    at += count;
  }
  return 0;
}

// One broadcast from root k % n, blocking or asynchronous, in place; the root overwrites its
// buffer at once after the call returns.
int broadcastOnce(int r, int n, int k, int64_t rows, bool blocking) {
  const int root = k % n;
  int64_t count = rows * kRowFloats;
  std::vector<float> b(static_cast<size_t>(count), -1.0f);
  if (r == root) {
    for (size_t i = 0; i < b.size(); ++i) b[i] = valueOf(root, k, i);
  }
  perseus_tensor t = cpuTensor(b.data(), PERSEUS_FLOAT32, 1, &count);
  const std::string name = "bc." + std::to_string(rows) + "." + std::to_string(root);
  if (blocking) {
    CHILD_CHECK(perseus_broadcast_blocking(name.c_str(), &t, &t, root, 0) == PERSEUS_OK);
  } else {
    perseus_handle h = 0;
    CHILD_CHECK(perseus_broadcast(name.c_str(), &t, &t, root, 0, &h) == PERSEUS_OK);
    CHILD_CHECK(perseus_wait(h, 20) == PERSEUS_OK && perseus_release(h) == PERSEUS_OK);
  }
  if (r == root) {
    std::fill(b.begin(), b.end(), -7.0f);
    return 0;
  }
  for (size_t i = 0; i < b.size(); ++i) CHILD_CHECK(b[i] == valueOf(root, k, i));
  return 0;
}

// Every kind of call, many times, for both sizes; the posts counted in *posted.
int exercise(int r, int n, uint64_t* posted) {
  for (int k = 0; k < 4 * n * 3; ++k) {
    for (int64_t rows : kRowsPerRank) {
      if (allgatherOnce(r, n, k, rows, k % 3 != 2) != 0) return 1;
      if (broadcastOnce(r, n, k, rows, k % 2 == 0) != 0) return 1;
    }
  }
  perseus_engine_stats stats;
  CHILD_CHECK(perseus_get_engine_stats(&stats) == PERSEUS_OK);
  *posted = stats.posted_collectives;
  return 0;
}

TEST(CapiPostedByAddress, BroadcastsAndAllgathersGiveThePostedBytesAfterTheBufferIsReused) {
  for (int n : {2, 3}) {
    auto st = runCapiJob(n, [&](int r) {
      CHILD_CHECK(perseus_init() == PERSEUS_OK);
      uint64_t posted = 0;
      if (exercise(r, n, &posted) != 0) return 1;
      // 12n calls of each size and kind; both allgathers (the larger only by address) and the
      // broadcasts (the larger by address with one reader, else negotiated) post from their
      // third run of a name.
      const uint64_t least = n == 2 ? 4 * (12 * 2 - 2 * 2 - 2 * 2) : 2 * (12 * 3 - 2);
      fprintf(stderr, "n=%d rank %d: %llu posted\n", n, r, static_cast<unsigned long long>(posted));
      CHILD_CHECK(posted >= least);
      CHILD_CHECK(perseus_shutdown() == PERSEUS_OK);
      return 0;
    });
    for (int r = 0; r < n; ++r)
      EXPECT_TRUE(st[r].ok()) << "n=" << n << " rank " << r << ": " << st[r].describe();
  }
}

TEST(CapiPostedByAddress, ARankThatDoesNotReadOthersMemoryMakesEveryonePostThroughThePools) {
  const int n = 3;
  auto st = runCapiJob(n, [&](int r) {
    if (r == 1) setenv("PERSEUS_SHM_SINGLE_COPY", "0", 1);
    CHILD_CHECK(perseus_init() == PERSEUS_OK);
    uint64_t posted = 0;
    if (exercise(r, n, &posted) != 0) return 1;
    // The 16 KiB names post through the pools; the 256 KiB allgather cannot be posted at all.
    fprintf(stderr, "rank %d: %llu posted\n", r, static_cast<unsigned long long>(posted));
    CHILD_CHECK(posted >= 12 * 3 - 2 + 3 * (4 - 2));
    CHILD_CHECK(posted < 2 * (12 * 3 - 2) + 3 * (4 - 2) + 12);
    CHILD_CHECK(perseus_shutdown() == PERSEUS_OK);
    return 0;
  });
  for (int r = 0; r < n; ++r) EXPECT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].describe();
}

// Note [By-address cap on many cores]: with more than one reduce thread per rank the negotiated
// single-copy read is split among them, and posts by address stop at 1 MiB.
TEST(CapiPostedByAddress, RanksWithSeveralReduceThreadsPostByAddressOnlyUpTo1MiB) {
  for (const char* threads : {"1", "2"}) {
    auto st = runCapiJob(2, [&](int r) {
      setenv("PERSEUS_REDUCE_THREADS", threads, 1);
      CHILD_CHECK(perseus_init() == PERSEUS_OK);
      int64_t count = 512 * 1024;  // 2 MiB
      std::vector<float> b(static_cast<size_t>(count), static_cast<float>(r));
      perseus_tensor t = cpuTensor(b.data(), PERSEUS_FLOAT32, 1, &count);
      for (int k = 0; k < 6; ++k) {
        CHILD_CHECK(perseus_broadcast_blocking("two.mib", &t, &t, 0, 0) == PERSEUS_OK);
        CHILD_CHECK(b[0] == 0.0f && b[count - 1] == 0.0f);
      }
      perseus_engine_stats stats;
      CHILD_CHECK(perseus_get_engine_stats(&stats) == PERSEUS_OK);
      fprintf(stderr, "threads %s rank %d: %llu posted\n", threads, r,
              static_cast<unsigned long long>(stats.posted_collectives));
      CHILD_CHECK(threads[0] == '1' ? stats.posted_collectives >= 3
                                    : stats.posted_collectives == 0);
      CHILD_CHECK(perseus_shutdown() == PERSEUS_OK);
      return 0;
    });
    for (int r = 0; r < 2; ++r)
      EXPECT_TRUE(st[r].ok()) << "threads " << threads << " rank " << r << ": " << st[r].describe();
  }
}

TEST(CapiPostedByAddress, AMismatchOfANamePostedByAddressIsReportedByName) {
  const int n = 2;
  auto st = runCapiJob(n, [&](int r) {
    CHILD_CHECK(perseus_init() == PERSEUS_OK);
    int64_t count = 64 * 1024;  // 256 KiB: only ever posted by address
    std::vector<float> b(static_cast<size_t>(count), static_cast<float>(r));
    perseus_tensor t = cpuTensor(b.data(), PERSEUS_FLOAT32, 1, &count);
    for (int k = 0; k < 6; ++k)
      CHILD_CHECK(perseus_broadcast_blocking("big", &t, &t, 0, 0) == PERSEUS_OK);
    CHILD_CHECK(b[count - 1] == 0.0f);
    perseus_engine_stats stats;
    CHILD_CHECK(perseus_get_engine_stats(&stats) == PERSEUS_OK && stats.posted_collectives >= 4);
    // A root that differs on one rank: negotiated, every rank fails naming the tensor.
    CHILD_CHECK(perseus_broadcast_blocking("big", &t, &t, r, 0) == PERSEUS_ERR_MISMATCH);
    CHILD_CHECK(std::string(perseus_last_error()).find("'big'") != std::string::npos);
    // The job goes on, and the name is posted again.
    for (int k = 0; k < 6; ++k) {
      std::fill(b.begin(), b.end(), static_cast<float>(r + k));
      CHILD_CHECK(perseus_broadcast_blocking("big", &t, &t, 1, 0) == PERSEUS_OK);
      CHILD_CHECK(b[0] == static_cast<float>(1 + k) && b[count - 1] == static_cast<float>(1 + k));
    }
    perseus_engine_stats after;
    CHILD_CHECK(perseus_get_engine_stats(&after) == PERSEUS_OK);
    CHILD_CHECK(after.posted_collectives > stats.posted_collectives);
    CHILD_CHECK(perseus_shutdown() == PERSEUS_OK);
    return 0;
  });
  for (int r = 0; r < n; ++r) EXPECT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].describe();
}

// Rank 1's part of a lent allgather of "ag.lost" (16 KiB per rank, by address): opened, so
// that only this thread reads the generation (the engine thread leaves a watched post alone),
// after rank 0 posted; unless `finish`, it returns with the generation complete and unread.
int openedAllgather(std::vector<float>* in, bool finish) {
  int64_t shape[2] = {64, kRowFloats};
  perseus_tensor t = cpuTensor(in->data(), PERSEUS_FLOAT32, 2, shape);
  int64_t result_shape[PERSEUS_MAX_NDIM];
  int32_t ndim = 2;
  perseus_opened o{};
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // rank 0 posts first
  CHILD_CHECK(perseus_open_allgather("ag.lost", &t, result_shape, &ndim, &o) == PERSEUS_OK);
  if (!finish) {
    CHILD_CHECK(o.open == 1);  // posted: the generation is complete once this returned
    return 0;
  }
  std::vector<float> out(2 * in->size());
  perseus_handle h = 0;
  if (o.open == 1) {
    CHILD_CHECK(perseus_finish_opened(&o, out.data(), &h) == PERSEUS_OK);
  } else {
    CHILD_CHECK(perseus_allgather("ag.lost", &t, 0, &h) == PERSEUS_OK);
  }
  if (h != 0) CHILD_CHECK(perseus_wait(h, 10) == PERSEUS_OK && perseus_release(h) == PERSEUS_OK);
  return 0;
}

// Rank 0's part: the asynchronous call, pending until rank 1 read its rows.
int pendingAllgather(std::vector<float>* in, perseus_handle* h) {
  int64_t shape[2] = {64, kRowFloats};
  perseus_tensor t = cpuTensor(in->data(), PERSEUS_FLOAT32, 2, shape);
  CHILD_CHECK(perseus_allgather("ag.lost", &t, 0, h) == PERSEUS_OK);
  return 0;
}

enum class Reader { kKilled, kKilledAtShutdown, kStalled };

// Rank 0 lends "ag.lost" to rank 1, which then never reads it (`how`): rank 0's handle fails
// within `limit_s` naming rank 1 and the tensor, with `want`.
void lendToAReaderThatNeverReads(Reader how, perseus_status want, double limit_s) {
  auto st = runCapiJob(
      2,
      [&](int r) {
        CHILD_CHECK(perseus_init() == PERSEUS_OK);
        std::vector<float> in(64 * kRowFloats, static_cast<float>(r));
        for (int k = 0; k < 6; ++k) {  // posted from the third run on
          perseus_handle h = 0;
          if (r == 1) {
            if (openedAllgather(&in, true) != 0) return 1;
            continue;
          }
          if (pendingAllgather(&in, &h) != 0) return 1;
          CHILD_CHECK(perseus_wait(h, 10) == PERSEUS_OK && perseus_release(h) == PERSEUS_OK);
        }
        if (r == 1) {
          if (openedAllgather(&in, false) != 0) return 1;
          // Rank 0 reads this rank's rows meanwhile and waits for this rank's read of its own.
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          if (how != Reader::kStalled) raise(SIGKILL);
          std::this_thread::sleep_for(std::chrono::seconds(4));  // past PERSEUS_TIMEOUT
          perseus_shutdown();  // whatever rank 0 left: the job is failing
          return 0;
        }
        perseus_handle h = 0;
        if (pendingAllgather(&in, &h) != 0) return 1;
        const auto start = std::chrono::steady_clock::now();
        if (how == Reader::kKilledAtShutdown) {
          std::this_thread::sleep_for(std::chrono::milliseconds(500));
          perseus_shutdown();  // with the post pending: ends, and fails it
        }
        const perseus_status s = perseus_wait(h, 30);
        const double took =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        const std::string msg = perseus_last_error();
        fprintf(stderr, "rank 0: after %.2f s: status %d: %s\n", took, s, msg.c_str());
        CHILD_CHECK(s == want);
        CHILD_CHECK(msg.find("'ag.lost'") != std::string::npos);
        CHILD_CHECK(msg.find("rank 1 ") != std::string::npos);
        if (how == Reader::kStalled)
          CHILD_CHECK(msg.find("to read its buffer") != std::string::npos);
        if (how == Reader::kKilled)
          CHILD_CHECK(msg.find("to read this rank's buffer") != std::string::npos);
        CHILD_CHECK(took < limit_s);
        perseus_release(h);
        perseus_shutdown();
        return 0;
      },
      "2");
  EXPECT_TRUE(st[0].ok()) << st[0].describe();
  if (how == Reader::kStalled) {
    EXPECT_TRUE(st[1].ok()) << st[1].describe();
  } else {
    EXPECT_EQ(st[1].signal, SIGKILL) << st[1].describe();
  }
}

TEST(CapiPostedByAddress, AReaderKilledBeforeItReadFailsTheLenderNamingItAndTheTensor) {
  // Found by its process, once per patience (PERSEUS_TIMEOUT / 8), not at the timeout.
  lendToAReaderThatNeverReads(Reader::kKilled, PERSEUS_ERR_PEER_LOST, 2.0);
}

TEST(CapiPostedByAddress, AShutdownWithALentPostThatAKilledReaderNeverReadEnds) {
  lendToAReaderThatNeverReads(Reader::kKilledAtShutdown, PERSEUS_ERR_PEER_LOST, 5.0);
}

TEST(CapiPostedByAddress, AReaderThatStallsBeforeItReadFailsTheLenderAtTheTimeout) {
  lendToAReaderThatNeverReads(Reader::kStalled, PERSEUS_ERR_TIMEOUT, 2.0 + 1.5);
}

}  // namespace
