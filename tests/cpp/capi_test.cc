// The C API end to end: a single rank in this process, the launcher's store server
// (perseus_store_server_start/stop), and jobs of forked processes that bootstrap through a store
// server exactly as under perseusrun (PERSEUS_* variables).
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <cstring>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

#include "perseus/c_api.h"
#include "support/capi_job.h"

namespace {

using perseus::testing::checkLostRank2;
using perseus::testing::cpuTensor;
using perseus::testing::kCapiJobSecret;
using perseus::testing::runCapiJob;

TEST(CapiTest, StoreServerStartsOnAFreePortAndStops) {
  void* server = nullptr;
  int32_t port = 0;
  ASSERT_EQ(perseus_store_server_start("127.0.0.1", 0, kCapiJobSecret, &port, &server), PERSEUS_OK)
      << perseus_last_error();
  EXPECT_GT(port, 0);
  EXPECT_EQ(perseus_store_server_stop(server), PERSEUS_OK) << perseus_last_error();
}

TEST(CapiTest, ErrorsBeforeInitAndBasics) {
  perseus_topology t;
  EXPECT_EQ(perseus_get_topology(&t), PERSEUS_ERR_NOT_INITIALIZED);
  EXPECT_NE(std::string(perseus_last_error()).find("perseus_init"), std::string::npos);
  perseus_handle h;
  float x = 1;
  int64_t shape[1] = {1};
  perseus_tensor tx = cpuTensor(&x, PERSEUS_FLOAT32, 1, shape);
  EXPECT_EQ(perseus_allreduce("x", &tx, &tx, PERSEUS_SUM, 1, 1, 0, &h),
            PERSEUS_ERR_NOT_INITIALIZED);
  EXPECT_EQ(perseus_is_initialized(), 0);
  EXPECT_NE(std::string(perseus_build_info()).find("cpu=1"), std::string::npos);
  std::string dump = perseus_params_dump();
  EXPECT_NE(dump.find("PERSEUS_FUSION_THRESHOLD="), std::string::npos);
  EXPECT_NE(dump.find('\t'), std::string::npos);
  EXPECT_EQ(perseus_wait(12345, 0), PERSEUS_ERR_INVALID_ARGUMENT);
}

TEST(CapiTest, SingleRankInThisProcess) {
  // Fork so that the process-wide default engine does not outlive this test.
  auto st = perseus::testing::runForked(
      1,
      [](int) {
        unsetenv("PERSEUS_RANK");
        unsetenv("PERSEUS_SIZE");
        CHILD_CHECK(perseus_init() == PERSEUS_OK);
        CHILD_CHECK(perseus_init() == PERSEUS_OK);  // idempotent
        perseus_topology t;
        CHILD_CHECK(perseus_get_topology(&t) == PERSEUS_OK && t.size == 1 && t.rank == 0);
        float v[3] = {1, 2, 3};
        int64_t shape[1] = {3};
        perseus_tensor tv = cpuTensor(v, PERSEUS_FLOAT32, 1, shape);
        perseus_handle h;
        CHILD_CHECK(perseus_allreduce("v", &tv, &tv, PERSEUS_AVERAGE, 2.0, 1.0, 0, &h) ==
                    PERSEUS_OK);
        CHILD_CHECK(perseus_wait(h, 10) == PERSEUS_OK);
        CHILD_CHECK(v[2] == 6.0f);
        // The engine's stamps, on the monotonic clock, in order.
        int64_t submitted = 0, completed = 0;
        CHILD_CHECK(perseus_handle_times(h, &submitted, &completed) == PERSEUS_OK);
        timespec now{};
        clock_gettime(CLOCK_MONOTONIC, &now);
        CHILD_CHECK(submitted > 0 && completed >= submitted &&
                    completed <= int64_t{now.tv_sec} * 1000000000 + now.tv_nsec);
        CHILD_CHECK(perseus_handle_times(h, nullptr, nullptr) == PERSEUS_OK);
        CHILD_CHECK(perseus_release(h) == PERSEUS_OK);
        CHILD_CHECK(perseus_handle_times(h, &submitted, &completed) ==
                    PERSEUS_ERR_INVALID_ARGUMENT);
        CHILD_CHECK(perseus_release(h) == PERSEUS_ERR_INVALID_ARGUMENT);
        // Validation.
        perseus_tensor bad = tv;
        bad.dtype = 42;
        CHILD_CHECK(perseus_allreduce("b", &bad, &bad, PERSEUS_SUM, 1, 1, 0, &h) ==
                    PERSEUS_ERR_INVALID_ARGUMENT);
        CHILD_CHECK(std::string(perseus_last_error()).find("'b'") != std::string::npos);
        bad = tv;
        bad.ndim = 17;
        CHILD_CHECK(perseus_allreduce("b", &bad, &bad, PERSEUS_SUM, 1, 1, 0, &h) ==
                    PERSEUS_ERR_INVALID_ARGUMENT);
        CHILD_CHECK(perseus_allreduce(nullptr, &tv, &tv, PERSEUS_SUM, 1, 1, 0, &h) ==
                    PERSEUS_ERR_INVALID_ARGUMENT);
        CHILD_CHECK(perseus_allreduce("b", nullptr, &tv, PERSEUS_SUM, 1, 1, 0, &h) ==
                    PERSEUS_ERR_INVALID_ARGUMENT);
        CHILD_CHECK(perseus_allreduce("b", &tv, &tv, 9, 1, 1, 0, &h) ==
                    PERSEUS_ERR_INVALID_ARGUMENT);
        CHILD_CHECK(perseus_allreduce("b", &tv, &tv, PERSEUS_SUM, 1, 1, 0, nullptr) ==
                    PERSEUS_ERR_INVALID_ARGUMENT);
        bad = tv;
        bad.device = 0;
        perseus_status s = perseus_allreduce("gpu", &bad, &bad, PERSEUS_SUM, 1, 1, 0, &h);
        if (std::string(perseus_build_info()).find("cuda=0") != std::string::npos) {
          CHILD_CHECK(s == PERSEUS_ERR_UNSUPPORTED);
          CHILD_CHECK(std::string(perseus_last_error()).find("CPU") != std::string::npos);
        }
        // Library-owned outputs.
        int32_t rows[4] = {1, 2, 3, 4};
        int64_t rshape[2] = {2, 2};
        perseus_tensor tr = cpuTensor(rows, PERSEUS_INT32, 2, rshape);
        CHILD_CHECK(perseus_allgather("g", &tr, 0, &h) == PERSEUS_OK);
        CHILD_CHECK(perseus_wait(h, 10) == PERSEUS_OK);
        int32_t n = 0;
        CHILD_CHECK(perseus_handle_num_outputs(h, &n) == PERSEUS_OK && n == 1);
        perseus_tensor out;
        CHILD_CHECK(perseus_handle_output(h, 0, &out) == PERSEUS_OK);
        CHILD_CHECK(out.ndim == 2 && out.shape[0] == 2 && static_cast<int32_t*>(out.data)[3] == 4);
        CHILD_CHECK(perseus_handle_output(h, 1, &out) == PERSEUS_ERR_INVALID_ARGUMENT);
        perseus_release(h);
        CHILD_CHECK(perseus_shutdown() == PERSEUS_OK);
        CHILD_CHECK(perseus_allreduce("v", &tv, &tv, PERSEUS_SUM, 1, 1, 0, &h) ==
                    PERSEUS_ERR_SHUT_DOWN);
        CHILD_CHECK(perseus_get_topology(&t) == PERSEUS_ERR_SHUT_DOWN);
        return 0;
      },
      std::chrono::seconds(30));
  ASSERT_TRUE(st[0].ok()) << st[0].describe();
}

struct CallbackState {
  std::atomic<int> calls{0};
  std::atomic<int> status{-1};
};

void onDone(perseus_handle, perseus_status s, void* user) {
  auto* cs = static_cast<CallbackState*>(user);
  cs->status = s;
  cs->calls++;
}

TEST(CapiTest, ThreeRanksEveryCollective) {
  const int n = 3;
  auto st = runCapiJob(n, [&](int r) {
    CHILD_CHECK(perseus_init() == PERSEUS_OK);
    perseus_topology t;
    CHILD_CHECK(perseus_get_topology(&t) == PERSEUS_OK && t.rank == r && t.size == n);
    perseus_handle h;
    // allreduce with a callback
    double v[4] = {double(r), 1, 2, 3};
    int64_t s4[1] = {4};
    perseus_tensor tv = cpuTensor(v, PERSEUS_FLOAT64, 1, s4);
    CallbackState cs;
    CHILD_CHECK(perseus_allreduce("v", &tv, &tv, PERSEUS_SUM, 1, 1, 0, &h) == PERSEUS_OK);
    CHILD_CHECK(perseus_set_callback(h, onDone, &cs) == PERSEUS_OK);
    CHILD_CHECK(perseus_wait(h, 20) == PERSEUS_OK);
    for (int i = 0; i < 200 && cs.calls == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    CHILD_CHECK(cs.calls == 1 && cs.status == PERSEUS_OK);
    CHILD_CHECK(v[0] == 3.0 && v[3] == 9.0);
    perseus_release(h);
    // grouped allreduce
    float a[2] = {1, 1}, b[3] = {2, 2, 2};
    int64_t s2[1] = {2}, s3[1] = {3};
    perseus_tensor ins[2] = {cpuTensor(a, PERSEUS_FLOAT32, 1, s2),
                             cpuTensor(b, PERSEUS_FLOAT32, 1, s3)};
    CHILD_CHECK(perseus_grouped_allreduce("grp", 2, ins, ins, PERSEUS_AVERAGE, 1, 1, 0, &h) ==
                PERSEUS_OK);
    CHILD_CHECK(perseus_wait(h, 20) == PERSEUS_OK && a[1] == 1.0f && b[2] == 2.0f);
    perseus_release(h);
    // broadcast
    int64_t x[2] = {r == 1 ? 77 : 0, r == 1 ? 78 : 0};
    perseus_tensor tx = cpuTensor(x, PERSEUS_INT64, 1, s2);
    CHILD_CHECK(perseus_broadcast("bc", &tx, &tx, 1, 0, &h) == PERSEUS_OK);
    CHILD_CHECK(perseus_wait(h, 20) == PERSEUS_OK && x[0] == 77 && x[1] == 78);
    perseus_release(h);
    // alltoall with splits: rank r sends (q+1) rows to rank q
    int64_t rows = 6;
    std::vector<float> data(rows, float(r));
    int64_t splits[3] = {1, 2, 3};
    perseus_tensor td = cpuTensor(data.data(), PERSEUS_FLOAT32, 1, &rows);
    CHILD_CHECK(perseus_alltoall("a2a", &td, splits, 3, 0, &h) == PERSEUS_OK);
    CHILD_CHECK(perseus_wait(h, 20) == PERSEUS_OK);
    const int64_t* recv = nullptr;
    int32_t nrecv = 0;
    CHILD_CHECK(perseus_handle_received_splits(h, &recv, &nrecv) == PERSEUS_OK && nrecv == 3 &&
                recv[2] == r + 1);
    perseus_tensor out;
    CHILD_CHECK(perseus_handle_output(h, 0, &out) == PERSEUS_OK && out.shape[0] == 3 * (r + 1));
    perseus_release(h);
    // reducescatter
    std::vector<int32_t> rs(7, 1);
    int64_t s7[1] = {7};
    perseus_tensor trs = cpuTensor(rs.data(), PERSEUS_INT32, 1, s7);
    CHILD_CHECK(perseus_reducescatter("rs", &trs, PERSEUS_SUM, 1, 1, 0, &h) == PERSEUS_OK);
    CHILD_CHECK(perseus_wait(h, 20) == PERSEUS_OK);
    CHILD_CHECK(perseus_handle_output(h, 0, &out) == PERSEUS_OK &&
                out.shape[0] == (r == 0 ? 3 : 2));
    CHILD_CHECK(static_cast<int32_t*>(out.data)[0] == 3);
    perseus_release(h);
    // mismatch: every rank gets the error, the job continues
    float m[4] = {0};
    int64_t ms[1] = {r == 2 ? 4 : 2};
    perseus_tensor tm = cpuTensor(m, PERSEUS_FLOAT32, 1, ms);
    CHILD_CHECK(perseus_allreduce("mm", &tm, &tm, PERSEUS_SUM, 1, 1, 0, &h) == PERSEUS_OK);
    CHILD_CHECK(perseus_wait(h, 20) == PERSEUS_ERR_MISMATCH);
    CHILD_CHECK(std::string(perseus_last_error()).find("'mm'") != std::string::npos);
    perseus_release(h);
    // process sets
    int32_t members[2] = {0, 2};
    int32_t id = -1;
    CHILD_CHECK(perseus_add_process_set(members, 2, &id) == PERSEUS_OK && id >= 1);
    int32_t rank_in = 0, size = 0, got[4], count = 0;
    CHILD_CHECK(perseus_process_set_info(id, &rank_in, &size) == PERSEUS_OK && size == 2);
    CHILD_CHECK(rank_in == (r == 0 ? 0 : r == 2 ? 1 : -1));
    CHILD_CHECK(perseus_process_set_ranks(id, nullptr, 0, &count) == PERSEUS_OK && count == 2);
    CHILD_CHECK(perseus_process_set_ranks(id, got, 4, &count) == PERSEUS_OK && got[1] == 2);
    if (r != 1) {
      CHILD_CHECK(perseus_barrier(id, &h) == PERSEUS_OK && perseus_wait(h, 20) == PERSEUS_OK);
      perseus_release(h);
    }
    CHILD_CHECK(perseus_remove_process_set(id) == PERSEUS_OK);
    // join: rank 0 joins first
    CHILD_CHECK(perseus_join(&h) == PERSEUS_OK && perseus_wait(h, 20) == PERSEUS_OK);
    int32_t last = -1;
    CHILD_CHECK(perseus_handle_join_rank(h, &last) == PERSEUS_OK && last >= 0 && last < n);
    perseus_release(h);
    CHILD_CHECK(perseus_barrier(0, &h) == PERSEUS_OK && perseus_wait(h, 20) == PERSEUS_OK);
    perseus_release(h);
    CHILD_CHECK(perseus_shutdown() == PERSEUS_OK);
    return 0;
  });
  for (int r = 0; r < n; ++r) EXPECT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].describe();
}

TEST(CapiTest, SigkilledRankFailsTheOthersWithItsRank) {
  const int n = 3;
  auto st = runCapiJob(
      n,
      [&](int r) {
        CHILD_CHECK(perseus_init() == PERSEUS_OK);
        const int64_t count = 4 << 20;  // 16 MiB of float32
        std::vector<float> big(count, 1.0f);
        perseus_tensor tb = cpuTensor(big.data(), PERSEUS_FLOAT32, 1, &count);
        const auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < 1000; ++i) {
          perseus_handle h;
          CHILD_CHECK(perseus_allreduce("big", &tb, &tb, PERSEUS_SUM, 1, 1, 0, &h) == PERSEUS_OK);
          if (r == 2 && i == 2) {
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
            raise(SIGKILL);  // in the middle of the third allreduce
          }
          perseus_status s = perseus_wait(h, 60);
          if (s != PERSEUS_OK) {
            double took =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            if (checkLostRank2(r, s, "'big'", took, 30) != 0) return 1;
            // Later requests fail at once with the same cause.
            perseus_handle h2;
            CHILD_CHECK(perseus_allreduce("next", &tb, &tb, PERSEUS_SUM, 1, 1, 0, &h2) ==
                        PERSEUS_OK);
            CHILD_CHECK(perseus_wait(h2, 1) == s);
            // Exit at once: a slower survivor may see this rank go before rank 2 (the cascade).
            perseus_shutdown();
            return 0;
          }
          perseus_release(h);
        }
        return 1;
      },
      "5");
  EXPECT_TRUE(st[0].ok()) << st[0].describe();
  EXPECT_TRUE(st[1].ok()) << st[1].describe();
  EXPECT_EQ(st[2].signal, SIGKILL);
}

TEST(CapiTest, SigkilledRankFailsTheOthersWhileTheyWaitForItsPost) {
  // Small allreduces of one name are posted (Note [Posted collectives]) after the first: the
  // survivors wait on rank 2's post, then negotiate, and find rank 2 gone.
  const int n = 3;
  auto st = runCapiJob(
      n,
      [&](int r) {
        CHILD_CHECK(perseus_init() == PERSEUS_OK);
        const int64_t count = 16;
        std::vector<float> v(count, 1.0f);
        perseus_tensor t = cpuTensor(v.data(), PERSEUS_FLOAT32, 1, &count);
        for (int i = 0; i < 1000; ++i) {
          perseus_handle h;
          if (r == 2 && i == 50) raise(SIGKILL);
          CHILD_CHECK(perseus_allreduce("small", &t, &t, PERSEUS_MAX, 1, 1, 0, &h) == PERSEUS_OK);
          const auto start = std::chrono::steady_clock::now();
          perseus_status s = perseus_wait(h, 60);
          if (s != PERSEUS_OK) {
            double took =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            if (checkLostRank2(r, s, "'small'", took, 10) != 0) return 1;
            CHILD_CHECK(i == 50);
            perseus_engine_stats stats;
            CHILD_CHECK(perseus_get_engine_stats(&stats) == PERSEUS_OK &&
                        stats.posted_allreduces >= 40);
            perseus_shutdown();
            return 0;
          }
          perseus_release(h);
        }
        return 1;
      },
      "5");
  EXPECT_TRUE(st[0].ok()) << st[0].describe();
  EXPECT_TRUE(st[1].ok()) << st[1].describe();
  EXPECT_EQ(st[2].signal, SIGKILL);
}

}  // namespace
