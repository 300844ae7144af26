// Single-copy broadcasts and allgathers (collectives/single_copy_shm.cc) between real forked
// processes over the shared-memory transport and arena: the right bytes with uneven sizes and
// every root, the agreed fall-back to the slot algorithms when one rank does not read
// (PERSEUS_SHM_SINGLE_COPY=0 there), and the cost model's choice for large messages.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "collectives/collectives.h"
#include "collectives/communicator.h"
#include "collectives/registry.h"
#include "support/forked_shm.h"
#include "support/shm_groups.h"

namespace perseus::collectives {
namespace {

using perseus::testing::crossMemoryPermitted;
using perseus::testing::shmTestParams;

uint8_t byteOf(int rank, size_t i) { return static_cast<uint8_t>(rank * 59 + i * 13 + (i >> 10)); }

// Child exit codes: 0 ok, 2x a wrong allgather from rank x, 3x a wrong broadcast from root x,
// 40 the cost model did not choose single-copy for a mid-sized broadcast, 43 it chose otherwise
// than the read threads say for a large one, 41 it fell back although every rank could read, 42 it
// did not fall back although one rank would not read, 44 it tried single-copy again after the
// members agreed to fall back.
int runRank(int r, const Params& params, Communicator& comm, bool expect_fallback) {
  const int n = comm.size();
  // Once the members fell back, single-copy is no longer offered on this communicator.
  auto algorithm = [&] {
    return comm.singleCopyFailed() ? std::string() : std::string("single-copy");
  };

  for (size_t scale : {size_t{1}, size_t{4099}, size_t{300007}}) {
    std::vector<size_t> sizes(n);
    for (int q = 0; q < n; ++q) sizes[q] = scale * static_cast<size_t>(q + 1) + (q == 1 ? 0 : 3);
    sizes[n - 1] = 0;  // a rank with nothing to give
    size_t total = 0;
    for (size_t s : sizes) total += s;
    std::vector<uint8_t> in(sizes[r]), out(total, 0xEE);
    for (size_t i = 0; i < in.size(); ++i) in[i] = byteOf(r, i);
    CollectiveArgs a;
    a.kind = Collective::kAllgatherv;
    a.in = in.data();
    a.out = out.data();
    a.sizes = &sizes;
    runCollective(comm, a, algorithm());
    size_t at = 0;
    for (int q = 0; q < n; ++q) {
      for (size_t i = 0; i < sizes[q]; ++i) {
        if (out[at + i] != byteOf(q, i)) return 20 + q;
      }
      at += sizes[q];
    }
    for (int root = 0; root < n; ++root) {
      std::vector<uint8_t> data(scale * 3 + 5, 0);
      if (r == root) {
        for (size_t i = 0; i < data.size(); ++i) data[i] = byteOf(root + 7, i);
      }
      CollectiveArgs b;
      b.kind = Collective::kBroadcast;
      b.in = b.out = data.data();
      b.bytes = data.size();
      b.root = root;
      runCollective(comm, b, algorithm());
      for (size_t i = 0; i < data.size(); ++i) {
        if (data[i] != byteOf(root + 7, i)) return 30 + root;
      }
    }
  }
  CollectiveArgs b;
  b.kind = Collective::kBroadcast;
  b.bytes = 768 << 10;
  if (expect_fallback) {
    if (singleCopyFallbacks() == 0) return 42;
    if (singleCopyFallbacks() != 1 || std::string(selectAlgorithm(comm, b, "").name) != "shm")
      return 44;
    return 0;
  }
  if (crossMemoryPermitted() && singleCopyFallbacks() != 0) return 41;
  // With the default 2 MiB slots: a broadcast of one slot half or less is read in one copy; a
  // larger one read by one thread goes through the slots, where the root's copy in and the
  // others' copy out of successive segments overlap (measured faster from 2-4 MiB on), but
  // one split among threads is read in one copy (Note [Split single-copy reads]).
  if (std::string(selectAlgorithm(comm, b, "").name) != "single-copy") return 40;
  b.bytes = 16 << 20;
  const char* large = params.reduce_threads > 1 ? "single-copy" : "shm";
  if (std::string(selectAlgorithm(comm, b, "").name) != large) return 43;
  return 0;
}

Params withDefaultSlots(Params p) {
  p.shm_slot_bytes = Params{}.shm_slot_bytes;
  return p;
}

void expectRanksOk(int n, const std::function<Params(int)>& params_of, bool expect_fallback) {
  perseus::testing::expectForkedShmRanksOk(n, "single-copy", params_of,
                                           [&](int r, const Params& params, Communicator& comm) {
                                             return runRank(r, params, comm, expect_fallback);
                                           });
}

TEST(SingleCopy, BroadcastsAndAllgathersBetweenProcesses) {
  expectRanksOk(
      3,
      [](int) {
        Params p = withDefaultSlots(shmTestParams());
        p.reduce_threads = 1;
        return p;
      },
      false);
}

// Note [Split single-copy reads]: forced threads split each read into runs, the last one short
// (the 300007-scale pieces and the 900026-byte broadcasts are not multiples of the thread
// count), and give the same bytes; a 16 MiB broadcast is then read in one split copy.
TEST(SingleCopy, BroadcastsAndAllgathersSplitAmongThreadsGiveTheSameBytes) {
  expectRanksOk(
      3,
      [](int) {
        Params p = withDefaultSlots(shmTestParams());
        p.reduce_threads = 3;
        return p;
      },
      false);
}

// Note [Broadcast in parts]: 4 ranks read a broadcast in two rounds of 3 parts (the 900026-byte
// message's parts are whole pages but the last), 2 ranks in one round of the whole message,
// split among 2 threads, from every root.
TEST(SingleCopy, BroadcastsInPartsGiveTheSameBytesFromEveryRoot) {
  for (int ranks : {2, 4}) {
    SCOPED_TRACE(ranks);
    expectRanksOk(
        ranks,
        [](int) {
          Params p = withDefaultSlots(shmTestParams());
          p.reduce_threads = 2;
          return p;
        },
        false);
  }
}

TEST(SingleCopy, ARankThatDoesNotReadSendsEveryRankThroughTheSlots) {
  expectRanksOk(
      3,
      [](int r) {
        Params p = withDefaultSlots(shmTestParams());
        p.shm_single_copy = r != 1;
        return p;
      },
      true);
}

}  // namespace
}  // namespace perseus::collectives
