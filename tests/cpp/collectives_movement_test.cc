// The data-movement collectives and reducescatterv: every algorithm x 1..5 ranks x topology,
// with uneven and empty blocks, against references computed here.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <string>

#include "collectives/collectives.h"
#include "collectives/registry.h"
#include "common/status.h"
#include "support/inproc_values.h"
#include "support/inproc_world.h"

namespace perseus::collectives {
namespace {

using testing::Bytes;

// kArenaStreaming: the arena with streaming slot stores (Note [Slot stores]).
enum class Topo { kArena, kArenaStreaming, kTransportOnly };

// Per-rank sizes that are uneven, include empty blocks and odd lengths.
std::vector<size_t> sizesFor(int p, size_t scale) {
  std::vector<size_t> v(p);
  for (int q = 0; q < p; ++q) v[q] = q % 3 == 1 ? 0 : scale * (q + 1) + 3 * q + 1;
  return v;
}

std::vector<std::string> algorithmsOf(Collective kind) {
  std::vector<std::string> names = {"auto"};
  for (const Algorithm* a : allAlgorithms()) {
    if (a->kind == kind) names.push_back(a->name);
  }
  return names;
}

// Runs args with `name` ("auto" = the entry point's choice) if the algorithm supports it.
bool runNamed(Communicator& comm, CollectiveArgs args, const std::string& name) {
  const Algorithm* a = findAlgorithm(args.kind, name);
  if (a == nullptr || !a->supports(comm, args)) return false;
  runCollective(comm, args, name);
  return true;
}

class CollectivesMovement : public ::testing::TestWithParam<std::tuple<int, Topo>> {};

TEST_P(CollectivesMovement, EveryAlgorithmWithUnevenSizes) {
  auto [p, topo] = GetParam();
  testing::InProcWorldOptions o;
  o.size = p;
  o.with_arena = topo != Topo::kTransportOnly;
  o.slot_bytes = 8 * 1024;
  if (topo == Topo::kArenaStreaming) o.params.shm_stores = "streaming";
  testing::InProcWorld world(o);
  world.runOk([&](int r) {
    auto comm = world.makeWorldComm(r);
    auto fail = [&](const std::string& what) { throw std::runtime_error(what); };
    for (size_t scale : {size_t{0}, size_t{1}, size_t{5}, size_t{10007}}) {
      auto sizes = sizesFor(p, scale);
      auto off = std::vector<size_t>(p + 1, 0);
      for (int q = 0; q < p; ++q) off[q + 1] = off[q] + sizes[q];

      for (const auto& name : algorithmsOf(Collective::kAllgatherv)) {
        Bytes in = testing::testBytes(r, sizes[r]), out(off[p], 0xEE), want;
        for (int q = 0; q < p; ++q) {
          Bytes b = testing::testBytes(q, sizes[q]);
          want.insert(want.end(), b.begin(), b.end());
        }
        CollectiveArgs a;
        a.kind = Collective::kAllgatherv;
        a.in = in.data();
        a.out = out.data();
        a.sizes = &sizes;
        if (name == "auto")
          allgatherv(*comm, in.data(), out.data(), sizes);
        else if (p == 1 || !runNamed(*comm, a, name))
          continue;
        if (out != want) fail("allgatherv " + name + " scale " + std::to_string(scale));
      }

      for (const auto& name : algorithmsOf(Collective::kBroadcast)) {
        for (int root : {0, p - 1}) {
          size_t bytes = off[p] + 17;
          Bytes data = r == root ? testing::testBytes(root, bytes, 9) : Bytes(bytes, 0);
          CollectiveArgs a;
          a.kind = Collective::kBroadcast;
          a.in = a.out = data.data();
          a.bytes = bytes;
          a.root = root;
          if (name == "auto")
            broadcast(*comm, data.data(), bytes, root);
          else if (p == 1 || !runNamed(*comm, a, name))
            continue;
          if (data != testing::testBytes(root, bytes, 9)) {
            fail("broadcast " + name + " root " + std::to_string(root));
          }
        }
      }

      for (const auto& name : algorithmsOf(Collective::kGatherv)) {
        const int root = p / 2;
        Bytes in = testing::testBytes(r, sizes[r], 3), out(off[p], 0), want;
        for (int q = 0; q < p; ++q) {
          Bytes b = testing::testBytes(q, sizes[q], 3);
          want.insert(want.end(), b.begin(), b.end());
        }
        if (name != "auto") continue;  // one algorithm
        gatherv(*comm, in.data(), out.data(), sizes, root);
        if (r == root && out != want) fail("gatherv");
      }

      // alltoallv: rank r sends (r + q) % 3 * scale + q bytes to q.
      {
        auto amount = [&](int from, int to) {
          return ((from + to) % 3) * scale + static_cast<size_t>(to);
        };
        std::vector<size_t> send(p), recv(p);
        for (int q = 0; q < p; ++q) {
          send[q] = amount(r, q);
          recv[q] = amount(q, r);
        }
        Bytes in = testing::testBytes(r, std::accumulate(send.begin(), send.end(), size_t{0}), 5);
        Bytes out(std::accumulate(recv.begin(), recv.end(), size_t{0}), 0), want;
        for (int q = 0; q < p; ++q) {
          Bytes full = testing::testBytes(
              q,
              [&] {
                size_t s = 0;
                for (int k = 0; k < p; ++k) s += amount(q, k);
                return s;
              }(),
              5);
          size_t start = 0;
          for (int k = 0; k < r; ++k) start += amount(q, k);
          want.insert(want.end(), full.begin() + start, full.begin() + start + amount(q, r));
        }
        alltoallv(*comm, in.data(), send, out.data(), recv);
        if (out != want) fail("alltoallv scale " + std::to_string(scale));
      }

      for (const auto& name : algorithmsOf(Collective::kReducescatterv)) {
        for (DataType t :
             {DataType::kFloat32, DataType::kInt8, DataType::kBFloat16, DataType::kFloat64}) {
          for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
            size_t total = off[p];
            Bytes in = testing::testVector(r, total, t, 2);
            Bytes want = testing::referenceReduce(p, total, t, op, 2);
            size_t es = dataTypeSize(t);
            bool in_place = scale == 5;
            Bytes out(sizes[r] * es, 0xEE);
            void* dst = in_place ? in.data() + off[r] * es : out.data();
            CollectiveArgs a;
            a.kind = Collective::kReducescatterv;
            a.in = in.data();
            a.out = dst;
            a.sizes = &sizes;
            a.dtype = t;
            a.op = op;
            if (name == "auto")
              reducescatterv(*comm, in.data(), dst, sizes, t, op);
            else if (p == 1 || !runNamed(*comm, a, name))
              continue;
            Bytes got(static_cast<unsigned char*>(dst),
                      static_cast<unsigned char*>(dst) + sizes[r] * es);
            Bytes mine(want.begin() + off[r] * es, want.begin() + (off[r] + sizes[r]) * es);
            if (got != mine) {
              fail("reducescatterv " + name + " " + dataTypeName(t) + " scale " +
                   std::to_string(scale) + (in_place ? " in place" : ""));
            }
          }
        }
      }

      {  // Average as Sum plus a postscale: the shm algorithm scales each piece it reduces
        size_t total = off[p];
        Bytes in = testing::testVector(r, total, DataType::kFloat32, 2);
        Bytes want = testing::referenceReduce(p, total, DataType::kFloat32, ReduceOp::kSum, 2);
        std::vector<float> got(sizes[r], -1.0f);
        reducescatterv(*comm, in.data(), got.data(), sizes, DataType::kFloat32, ReduceOp::kSum,
                       0.5);
        for (size_t i = 0; i < sizes[r]; ++i) {
          float w;
          std::memcpy(&w, want.data() + (off[r] + i) * sizeof w, sizeof w);
          if (got[i] != w * 0.5f) fail("reducescatterv postscale scale " + std::to_string(scale));
        }
      }

      for (const auto& name : algorithmsOf(Collective::kBarrier)) {
        CollectiveArgs a;
        a.kind = Collective::kBarrier;
        if (name == "auto")
          barrier(*comm);
        else if (p > 1)
          runNamed(*comm, a, name);
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(SizesAndTopologies, CollectivesMovement,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 5),
                                            ::testing::Values(Topo::kArena, Topo::kArenaStreaming,
                                                              Topo::kTransportOnly)),
                         [](const auto& info) {
                           const Topo t = std::get<1>(info.param);
                           return std::to_string(std::get<0>(info.param)) + "_ranks_" +
                                  (t == Topo::kArena            ? "arena"
                                   : t == Topo::kArenaStreaming ? "arena_streaming"
                                                                : "transport");
                         });

}  // namespace
}  // namespace perseus::collectives
