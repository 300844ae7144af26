// The blocking calls of the C API (perseus_allreduce_blocking, perseus_broadcast_blocking,
// perseus_allreduce_on_stream on CPU tensors, perseus_open_* and perseus_finish_opened):
// the same results and errors as the asynchronous calls, on the negotiated path (a name's
// first runs, large tensors, process sets) and on the post lane, where the rank that posts
// last finishes with no handle and the others wait on an untimed one.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "perseus/c_api.h"
#include "support/capi_job.h"

namespace {

using perseus::testing::checkLostRank2;
using perseus::testing::cpuTensor;
using perseus::testing::runCapiJob;

TEST(CapiBlocking, ResultsMatchTheAsynchronousCallsOnEveryPath) {
  const int n = 3;
  auto st = runCapiJob(n, [&](int r) {
    CHILD_CHECK(perseus_init() == PERSEUS_OK);
    // 5 floats: posted from the name's third run; 40000: always negotiated.
    for (int64_t count : {int64_t{5}, int64_t{40000}}) {
      std::vector<float> in(static_cast<size_t>(count)), out(in.size()), bc(in.size());
      perseus_tensor ti = cpuTensor(in.data(), PERSEUS_FLOAT32, 1, &count);
      perseus_tensor to = cpuTensor(out.data(), PERSEUS_FLOAT32, 1, &count);
      perseus_tensor tb = cpuTensor(bc.data(), PERSEUS_FLOAT32, 1, &count);
      const std::string sum = "sum." + std::to_string(count), avg = "avg." + std::to_string(count),
                        root = "bc." + std::to_string(count);
      for (int it = 0; it < 60; ++it) {
        for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(r + 1) * (it + 1) + i;
        // Rank 1 mixes in the asynchronous call, rank 2 the call on a stream (no stream for a
        // CPU tensor): every kind posts into the same slots.
        if (r == 2 && it % 2 == 0) {
          CHILD_CHECK(perseus_allreduce_on_stream(sum.c_str(), &ti, &to, PERSEUS_SUM, 1, 1, 0,
                                                  nullptr) == PERSEUS_OK);
        } else if (r == 1 && it % 3 == 0) {
          perseus_handle h;
          CHILD_CHECK(perseus_allreduce(sum.c_str(), &ti, &to, PERSEUS_SUM, 1, 1, 0, &h) ==
                      PERSEUS_OK);
          CHILD_CHECK(perseus_wait(h, 20) == PERSEUS_OK && perseus_release(h) == PERSEUS_OK);
        } else {
          CHILD_CHECK(perseus_allreduce_blocking(sum.c_str(), &ti, &to, PERSEUS_SUM, 1, 1, 0) ==
                      PERSEUS_OK);
        }
        for (size_t i = 0; i < in.size(); ++i) {
          CHILD_CHECK(out[i] == 6.0f * (it + 1) + 3.0f * i);  // (1 + 2 + 3)(it + 1) + n i
        }
        // In place, with an average and both scales: (sum * 2 / n) * 0.5 = sum / n.
        std::vector<float> copy = in;
        CHILD_CHECK(perseus_allreduce_blocking(avg.c_str(), &ti, &ti, PERSEUS_AVERAGE, 2.0, 0.5,
                                               0) == PERSEUS_OK);
        for (size_t i = 0; i < in.size(); ++i)
          CHILD_CHECK(in[i] == (6.0f * (it + 1) + 3.0f * i) / 3.0f);
        in = copy;
        for (size_t i = 0; i < bc.size(); ++i) bc[i] = r == 2 ? it + 0.5f * i : -1.0f;
        CHILD_CHECK(perseus_broadcast_blocking(root.c_str(), &tb, &tb, 2, 0) == PERSEUS_OK);
        for (size_t i = 0; i < bc.size(); ++i) CHILD_CHECK(bc[i] == it + 0.5f * i);
      }
    }
    perseus_engine_stats stats;
    CHILD_CHECK(perseus_get_engine_stats(&stats) == PERSEUS_OK);
    // The small names were posted after their first runs (2 allreduces and 1 broadcast each
    // step), the large ones never.
    CHILD_CHECK(stats.posted_allreduces >= 100 && stats.posted_collectives >= 150);
    fprintf(stderr, "rank %d: %llu posted allreduces, %llu posted collectives\n", r,
            static_cast<unsigned long long>(stats.posted_allreduces),
            static_cast<unsigned long long>(stats.posted_collectives));
    CHILD_CHECK(perseus_shutdown() == PERSEUS_OK);
    return 0;
  });
  for (int r = 0; r < n; ++r) EXPECT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].describe();
}

TEST(CapiBlocking, ErrorsAreTheAsynchronousCallsErrors) {
  const int n = 2;
  auto st = runCapiJob(n, [&](int r) {
    int64_t count = 4;
    std::vector<float> v(4, 1.0f);
    perseus_tensor t = cpuTensor(v.data(), PERSEUS_FLOAT32, 1, &count);
    CHILD_CHECK(perseus_allreduce_blocking("early", &t, &t, PERSEUS_SUM, 1, 1, 0) ==
                PERSEUS_ERR_NOT_INITIALIZED);
    CHILD_CHECK(std::string(perseus_last_error()).find("perseus_init") != std::string::npos);
    CHILD_CHECK(perseus_init() == PERSEUS_OK);
    CHILD_CHECK(perseus_allreduce_blocking(nullptr, &t, &t, PERSEUS_SUM, 1, 1, 0) ==
                PERSEUS_ERR_INVALID_ARGUMENT);
    CHILD_CHECK(perseus_allreduce_blocking("x", nullptr, &t, PERSEUS_SUM, 1, 1, 0) ==
                PERSEUS_ERR_INVALID_ARGUMENT);
    CHILD_CHECK(perseus_allreduce_blocking("x", &t, nullptr, PERSEUS_SUM, 1, 1, 0) ==
                PERSEUS_ERR_INVALID_ARGUMENT);
    CHILD_CHECK(perseus_allreduce_blocking("x", &t, &t, 42, 1, 1, 0) ==
                PERSEUS_ERR_INVALID_ARGUMENT);
    CHILD_CHECK(std::string(perseus_last_error()).find("'x'") != std::string::npos);
    CHILD_CHECK(perseus_broadcast_blocking("", &t, &t, 0, 0) == PERSEUS_ERR_INVALID_ARGUMENT);
    CHILD_CHECK(perseus_allreduce_blocking("x", &t, &t, PERSEUS_SUM, 1, 1, 7) ==
                PERSEUS_ERR_INVALID_ARGUMENT);
    // A name posted for a while, then a shape that differs on one rank: the post falls back
    // to negotiation, which reports the mismatch on every rank; the job goes on.
    for (int it = 0; it < 20; ++it) {
      CHILD_CHECK(perseus_allreduce_blocking("grad", &t, &t, PERSEUS_MAX, 1, 1, 0) == PERSEUS_OK);
    }
    int64_t other = r == 0 ? 3 : 4;
    perseus_tensor odd = cpuTensor(v.data(), PERSEUS_FLOAT32, 1, &other);
    CHILD_CHECK(perseus_allreduce_blocking("grad", &odd, &odd, PERSEUS_MAX, 1, 1, 0) ==
                PERSEUS_ERR_MISMATCH);
    const std::string msg = perseus_last_error();
    CHILD_CHECK(msg.find("'grad'") != std::string::npos && msg.find("shape") != std::string::npos);
    // A root that differs: the same.
    CHILD_CHECK(perseus_broadcast_blocking("root", &t, &t, r, 0) == PERSEUS_ERR_MISMATCH);
    for (int it = 0; it < 20; ++it) {
      std::fill(v.begin(), v.end(), static_cast<float>(r));
      CHILD_CHECK(perseus_allreduce_blocking("grad", &t, &t, PERSEUS_SUM, 1, 1, 0) == PERSEUS_OK);
      CHILD_CHECK(v[3] == 1.0f);
    }
    CHILD_CHECK(perseus_shutdown() == PERSEUS_OK);
    CHILD_CHECK(perseus_allreduce_blocking("late", &t, &t, PERSEUS_SUM, 1, 1, 0) ==
                PERSEUS_ERR_SHUT_DOWN);
    return 0;
  });
  for (int r = 0; r < n; ++r) EXPECT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].describe();
}

TEST(CapiBlocking, ADuplicateWhileACallWatchesItsPostFailsLocally) {
  // With a long spin the rank that posts first watches its post with no handle until rank 1
  // posts, 300 ms later; meanwhile another thread's posted and negotiated submissions of the
  // name are duplicates.
  setenv("PERSEUS_SPIN_US", "3000000", 1);
  const int n = 2;
  auto st = runCapiJob(n, [&](int r) {
    CHILD_CHECK(perseus_init() == PERSEUS_OK);
    int64_t count = 4, other = 5;
    std::vector<float> v(5, 1.0f), w(5, 1.0f);
    perseus_tensor t = cpuTensor(v.data(), PERSEUS_FLOAT32, 1, &count);
    for (int it = 0; it < 10; ++it) {
      CHILD_CHECK(perseus_allreduce_blocking("dup", &t, &t, PERSEUS_MAX, 1, 1, 0) == PERSEUS_OK);
    }
    if (r == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    } else {
      int seen = 0;
      std::thread other_thread([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        perseus_tensor tw = cpuTensor(w.data(), PERSEUS_FLOAT32, 1, &count);
        perseus_tensor odd = cpuTensor(w.data(), PERSEUS_FLOAT32, 1, &other);
        perseus_handle h;
        if (perseus_allreduce("dup", &tw, &tw, PERSEUS_MAX, 1, 1, 0, &h) ==
                PERSEUS_ERR_DUPLICATE_NAME &&
            std::string(perseus_last_error()).find("'dup'") != std::string::npos) {
          ++seen;
        }
        if (perseus_allreduce_blocking("dup", &odd, &odd, PERSEUS_MAX, 1, 1, 0) ==
            PERSEUS_ERR_DUPLICATE_NAME) {
          ++seen;
        }
      });
      const auto start = std::chrono::steady_clock::now();
      std::fill(v.begin(), v.end(), 2.0f);
      CHILD_CHECK(perseus_allreduce_blocking("dup", &t, &t, PERSEUS_MAX, 1, 1, 0) == PERSEUS_OK);
      const double took =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      other_thread.join();
      CHILD_CHECK(seen == 2 && took > 0.2 && v[0] == 2.0f);
    }
    if (r == 1)
      CHILD_CHECK(perseus_allreduce_blocking("dup", &t, &t, PERSEUS_MAX, 1, 1, 0) == PERSEUS_OK);
    CHILD_CHECK(v[0] == 2.0f);
    perseus_engine_stats stats;
    CHILD_CHECK(perseus_get_engine_stats(&stats) == PERSEUS_OK && stats.posted_allreduces >= 8);
    CHILD_CHECK(perseus_shutdown() == PERSEUS_OK);
    return 0;
  });
  unsetenv("PERSEUS_SPIN_US");
  for (int r = 0; r < n; ++r) EXPECT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].describe();
}

// One opened allreduce or allgather (perseus_open_*): its output made after the post, as a
// framework's new tensor is, then finished into it or waited for through the handle. The
// result's floats; an allgather's shape in *shape. Negotiated when the post path did not take it.
std::vector<float> openedCall(bool gather, const std::string& name, perseus_tensor* in, bool slow,
                              int* opened_count, std::vector<int64_t>* shape) {
  if (slow) std::this_thread::sleep_for(std::chrono::milliseconds(3));  // the others go late
  perseus_opened opened{};
  int64_t result_shape[PERSEUS_MAX_NDIM];
  int32_t ndim = in->ndim;
  std::copy(in->shape, in->shape + in->ndim, result_shape);
  const perseus_status s =
      gather ? perseus_open_allgather(name.c_str(), in, result_shape, &ndim, &opened)
             : perseus_open_allreduce(name.c_str(), in, PERSEUS_SUM, 1, 1, &opened);
  if (s != PERSEUS_OK || opened.open == 0) {
    perseus_handle h = 0;
    perseus_tensor result{};
    std::vector<float> out(gather ? 0 : static_cast<size_t>(in->shape[0]));
    perseus_tensor to = cpuTensor(out.data(), PERSEUS_FLOAT32, in->ndim, in->shape);
    const perseus_status called =
        gather ? perseus_allgather(name.c_str(), in, 0, &h)
               : perseus_allreduce(name.c_str(), in, &to, PERSEUS_SUM, 1, 1, 0, &h);
    if (s != PERSEUS_OK || called != PERSEUS_OK || perseus_wait(h, 20) != PERSEUS_OK) return {};
    if (gather && perseus_handle_output(h, 0, &result) == PERSEUS_OK) {
      shape->assign(result.shape, result.shape + result.ndim);
      size_t n = 1;
      for (int64_t d : *shape) n *= static_cast<size_t>(d);
      const auto* p = static_cast<const float*>(result.data);
      out.assign(p, p + n);
    }
    perseus_release(h);
    return out;
  }
  ++*opened_count;
  size_t n = 1;
  for (int32_t i = 0; i < ndim; ++i) n *= static_cast<size_t>(result_shape[i]);
  std::vector<float> out(n, -1.0f);  // made after the post
  shape->assign(result_shape, result_shape + ndim);
  perseus_handle h = -1;
  if (perseus_finish_opened(&opened, out.data(), &h) != PERSEUS_OK) return {};
  if (h == 0) return out;
  perseus_tensor result{};
  if (perseus_wait(h, 20) != PERSEUS_OK) return {};
  if (gather && perseus_handle_output(h, 0, &result) == PERSEUS_OK) {
    shape->assign(result.shape, result.shape + result.ndim);
    const auto* p = static_cast<const float*>(result.data);
    out.assign(p, p + n);
  }
  perseus_release(h);
  return out;
}

TEST(CapiBlocking, OpenedCallsFinishInTheOutputMadeAfterThePostOrThroughTheHandle) {
  const int n = 3;
  auto st = runCapiJob(n, [&](int r) {
    CHILD_CHECK(perseus_init() == PERSEUS_OK);
    int64_t rows[2] = {r + 1, 2};  // allgather: ranks differ in rows, 1 + 2 + 3 of them
    int64_t count = 5;
    std::vector<float> g(static_cast<size_t>(2 * (r + 1))), a(5);
    perseus_tensor tg = cpuTensor(g.data(), PERSEUS_FLOAT32, 2, rows);
    perseus_tensor ta = cpuTensor(a.data(), PERSEUS_FLOAT32, 1, &count);
    int opened = 0;
    for (int it = 0; it < 40; ++it) {
      // Every 8th call, a rank comes late: the others' opened calls wait on past their watch.
      const bool slow = it % 8 == 7 && r == it % n;
      for (size_t i = 0; i < g.size(); ++i) g[i] = 100.0f * r + it + i;
      for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(r + 1) * (it + 1) + i;
      std::vector<int64_t> shape;
      std::vector<float> got = openedCall(true, "opened.ag", &tg, slow, &opened, &shape);
      CHILD_CHECK(shape == (std::vector<int64_t>{6, 2}) && got.size() == 12);
      size_t k = 0;
      for (int q = 0; q < n; ++q) {
        for (int i = 0; i < 2 * (q + 1); ++i) CHILD_CHECK(got[k++] == 100.0f * q + it + i);
      }
      got = openedCall(false, "opened.ar", &ta, slow, &opened, &shape);
      CHILD_CHECK(got.size() == 5);
      for (size_t i = 0; i < got.size(); ++i) CHILD_CHECK(got[i] == 6.0f * (it + 1) + 3.0f * i);
    }
    CHILD_CHECK(opened > 40);  // posted from each name's third run on
    CHILD_CHECK(perseus_shutdown() == PERSEUS_OK);
    return 0;
  });
  for (int r = 0; r < n; ++r) EXPECT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].describe();
}

TEST(CapiBlocking, ASigkilledRankFailsTheOthersBlockedOnItsPost) {
  const int n = 3;
  auto st = runCapiJob(
      n,
      [&](int r) {
        CHILD_CHECK(perseus_init() == PERSEUS_OK);
        int64_t count = 16;
        std::vector<float> v(16, 1.0f);
        perseus_tensor t = cpuTensor(v.data(), PERSEUS_FLOAT32, 1, &count);
        for (int i = 0; i < 1000; ++i) {
          if (r == 2 && i == 50) raise(SIGKILL);
          const auto start = std::chrono::steady_clock::now();
          perseus_status s = perseus_allreduce_blocking("small", &t, &t, PERSEUS_MAX, 1, 1, 0);
          if (s == PERSEUS_OK) continue;
          const double took =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          if (checkLostRank2(r, s, "'small'", took, 10) != 0) return 1;
          CHILD_CHECK(i == 50);
          perseus_shutdown();
          return 0;
        }
        return 1;
      },
      "5");
  EXPECT_TRUE(st[0].ok()) << st[0].describe();
  EXPECT_TRUE(st[1].ok()) << st[1].describe();
  EXPECT_EQ(st[2].signal, SIGKILL);
}

}  // namespace
