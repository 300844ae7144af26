// The shared-memory transport between real forked processes: collective patterns, a peer
// killed with SIGKILL mid-transfer, and nothing left in /dev/shm afterwards.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "common/status.h"
#include "support/forked_ranks.h"
#include "support/shared_barrier.h"
#include "support/shm_groups.h"

namespace perseus::transport {
namespace {

using namespace std::chrono_literals;
using perseus::testing::ChildStatus;
using perseus::testing::makeShmTransport;
using perseus::testing::runForked;
using perseus::testing::SharedBarrier;
using perseus::testing::shmNamesOf;
using perseus::testing::shmTestParams;
using perseus::testing::uniqueJobId;

constexpr int kLostRightRank = 10;  // child exit codes that tell the parent what happened
constexpr int kLostWrongRank = 11;
constexpr int kNoError = 12;
constexpr int kTooSlow = 13;

std::unique_ptr<shm::ShmLocalGroup> join(const std::string& job, int rank, int n,
                                         SharedBarrier& barrier, const Params& params) {
  std::vector<int> ranks(n);
  for (int i = 0; i < n; ++i) ranks[i] = i;
  return shm::createShmLocalGroup(job, rank, ranks, params, [&] { barrier.wait(); });
}

void expectAllOk(const std::vector<ChildStatus>& st) {
  for (size_t i = 0; i < st.size(); ++i)
    EXPECT_TRUE(st[i].ok()) << "rank " << i << ": " << st[i].describe();
}

uint8_t byteOf(int from, int to, size_t i) {
  return static_cast<uint8_t>(from * 31 + to * 5 + i + (i >> 11));
}

TEST(ShmProcess, AlltoallAndRingBetweenProcesses) {
  const int n = 3;
  const std::string job = uniqueJobId("procs");
  SharedBarrier barrier(n);
  const Params params = shmTestParams();
  auto st = runForked(
      n,
      [&](int r) {
        auto group = join(job, r, n, barrier, params);
        auto t = makeShmTransport(*group, r, n, params);
        const size_t bytes = 300001;
        std::vector<std::vector<uint8_t>> out(n), in(n);
        std::vector<SendOp> sends;
        std::vector<RecvOp> recvs;
        for (int p = 0; p < n; ++p) {
          out[p].resize(bytes);
          in[p].resize(bytes);
          for (size_t i = 0; i < bytes; ++i) out[p][i] = byteOf(r, p, i);
          sends.push_back({p, out[p].data(), bytes});  // includes a self-send
          recvs.push_back({p, in[p].data(), bytes});
        }
        t->exchange(sends, recvs);
        for (int p = 0; p < n; ++p) {
          for (size_t i = 0; i < bytes; ++i) {
            if (in[p][i] != byteOf(p, r, i)) return 20 + p;
          }
        }
        // Ring: pass a token around n times.
        int token = r;
        for (int step = 0; step < n; ++step) {
          int got = -1;
          t->sendRecv((r + 1) % n, &token, sizeof token, (r + n - 1) % n, &got, sizeof got);
          token = got;
        }
        return token == r ? 0 : 30;
      },
      20s);
  expectAllOk(st);
  EXPECT_TRUE(shmNamesOf(job).empty());
}

// Rank `victim` SIGKILLs itself in the middle of a large transfer with rank 0; rank 0 must throw
// PeerLostError naming it quickly (not after PERSEUS_TIMEOUT, which is set far away).
void runKilledPeer(bool survivor_sends) {
  const int n = 3, victim = 2;
  const std::string job = uniqueJobId("kill");
  SharedBarrier barrier(n);
  Params params = shmTestParams();
  params.timeout_s = 60;
  auto st = runForked(
      n,
      [&](int r) {
        auto group = join(job, r, n, barrier, params);
        auto t = makeShmTransport(*group, r, n, params);
        std::vector<uint8_t> big(64 << 20);
        if (r == victim) {
          // Take (or give) part of the stream, then die without any cleanup.
          if (survivor_sends) {
            t->recv(0, big.data(), 1 << 20);
          } else {
            t->send(0, big.data(), 1 << 20);
          }
          ::raise(SIGKILL);
        }
        if (r == 1) {
          t->recv(0, big.data(), 16);  // an innocent bystander finishes normally
          return 0;
        }
        t->send(1, big.data(), 16);
        const auto start = std::chrono::steady_clock::now();
        try {
          if (survivor_sends) {
            t->send(victim, big.data(), big.size());
          } else {
            t->recv(victim, big.data(), big.size());
          }
        } catch (const PeerLostError& e) {
          std::fprintf(stderr, "survivor got: %s\n", e.what());
          if (std::chrono::steady_clock::now() - start > 5s) return kTooSlow;
          return e.rank() == victim ? kLostRightRank : kLostWrongRank;
        }
        return kNoError;
      },
      30s);
  EXPECT_EQ(st[0].exit_code, kLostRightRank) << st[0].describe();
  EXPECT_TRUE(st[1].ok()) << st[1].describe();
  EXPECT_EQ(st[victim].signal, SIGKILL) << st[victim].describe();
  EXPECT_TRUE(shmNamesOf(job).empty());
}

TEST(ShmProcess, PeerKilledWhileWeSendThrowsPeerLost) { runKilledPeer(true); }
TEST(ShmProcess, PeerKilledWhileWeReceiveThrowsPeerLost) { runKilledPeer(false); }

TEST(ShmProcess, ArenaBarrierNoticesAKilledMember) {
  const int n = 2;
  const std::string job = uniqueJobId("akill");
  SharedBarrier barrier(n);
  Params params = shmTestParams();
  params.timeout_s = 60;
  auto st = runForked(
      n,
      [&](int r) {
        auto group = join(job, r, n, barrier, params);
        ShmArena& arena = *group->arena;
        for (int i = 0; i < 100; ++i) arena.barrier(0, {0, 1});
        if (r == 1) ::raise(SIGKILL);
        try {
          arena.barrier(0, {0, 1});
        } catch (const PeerLostError& e) {
          return e.rank() == 1 ? kLostRightRank : kLostWrongRank;
        }
        return kNoError;
      },
      20s);
  EXPECT_EQ(st[0].exit_code, kLostRightRank) << st[0].describe();
  EXPECT_EQ(st[1].signal, SIGKILL) << st[1].describe();
  EXPECT_TRUE(shmNamesOf(job).empty());
}

TEST(ShmProcess, ArenaSlotsAreSharedBetweenProcesses) {
  const int n = 3;
  const std::string job = uniqueJobId("aslot");
  SharedBarrier barrier(n);
  const Params params = shmTestParams();
  auto st = runForked(
      n,
      [&](int r) {
        auto group = join(job, r, n, barrier, params);
        ShmArena& arena = *group->arena;
        std::vector<int> all = {0, 1, 2};
        for (int round = 0; round < 200; ++round) {
          static_cast<int*>(arena.slot(r))[round % 64] = round * 10 + r;
          arena.barrier(3, all);
          for (int p = 0; p < n; ++p) {
            if (static_cast<int*>(arena.slot(p))[round % 64] != round * 10 + p) return 40 + p;
          }
          arena.barrier(3, all);  // nobody overwrites a slot that a slower rank still reads
        }
        return 0;
      },
      20s);
  expectAllOk(st);
}

}  // namespace
}  // namespace perseus::transport
