// Allreduce: every algorithm that supports the topology x every dtype x op x awkward counts,
// for 1..5 ranks as threads, on one host with the arena, on one host without it (transport
// only) and on two simulated hosts. Every rank checks its result bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "collectives/collectives.h"
#include "collectives/registry.h"
#include "common/status.h"
#include "kernels/reduce.h"
#include "support/inproc_values.h"
#include "support/inproc_world.h"

namespace perseus::collectives {
namespace {

using testing::Bytes;

enum class Topo { kArena, kTransportOnly, kTwoHosts };
const char* topoName(Topo t) {
  return t == Topo::kArena ? "arena" : t == Topo::kTransportOnly ? "transport" : "two_hosts";
}

testing::InProcWorldOptions optionsFor(int size, Topo topo) {
  testing::InProcWorldOptions o;
  o.size = size;
  o.with_arena = topo != Topo::kTransportOnly;
  o.slot_bytes = 16 * 1024;  // small: many segments even for modest vectors
  if (topo == Topo::kTwoHosts) {
    for (int r = 0; r < size; ++r) o.host_of_rank.push_back(r < (size + 1) / 2 ? 0 : 1);
  }
  return o;
}

constexpr DataType kTypes[] = {DataType::kUInt8,   DataType::kInt8,    DataType::kInt32,
                               DataType::kInt64,   DataType::kFloat16, DataType::kBFloat16,
                               DataType::kFloat32, DataType::kFloat64, DataType::kBool};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct};

class CollectivesAllreduce : public ::testing::TestWithParam<std::tuple<int, Topo>> {};

TEST_P(CollectivesAllreduce, EveryAlgorithmTypeOpAndCount) {
  auto [size, topo] = GetParam();
  testing::InProcWorld world(optionsFor(size, topo));
  world.runOk([&](int rank) {
    auto comm = world.makeWorldComm(rank);
    std::vector<std::string> names = {"auto"};
    for (const Algorithm* a : allAlgorithms()) {
      if (a->kind == Collective::kAllreduce) names.push_back(a->name);
    }
    for (const std::string& name : names) {
      const Algorithm* algo = findAlgorithm(Collective::kAllreduce, name);
      for (DataType t : kTypes) {
        for (ReduceOp op : kOps) {
          for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1000}, size_t{5003}}) {
            CollectiveArgs probe;
            probe.count = count;
            probe.dtype = t;
            if (algo && (size == 1 || count == 0 || !algo->supports(*comm, probe))) continue;
            Bytes in = testing::testVector(rank, count, t), out(in.size(), 0xEE);
            bool in_place = count % 2 == 1;
            void* dst = in_place ? in.data() : out.data();
            if (algo == nullptr) {
              allreduce(*comm, in.data(), dst, count, t, op);
            } else {
              CollectiveArgs args = probe;
              args.in = in.data();
              args.out = dst;
              args.op = op;
              runCollective(*comm, args, name);
            }
            Bytes got = in_place ? in : out;
            long bad =
                testing::firstDifference(got, testing::referenceReduce(size, count, t, op), t);
            if (bad >= 0) {
              throw std::runtime_error(PERSEUS_STR(
                  name << " " << dataTypeName(t) << " " << reduceOpName(op) << " count " << count
                       << (in_place ? " in place" : "") << ": first wrong element " << bad));
            }
          }
        }
      }
      // One large, odd-sized vector per algorithm.
      const size_t big = 1000003;
      CollectiveArgs probe;
      probe.count = big;
      probe.dtype = DataType::kFloat32;
      if (algo && (size == 1 || !algo->supports(*comm, probe))) continue;
      if (size == 5 && topo != Topo::kArena) continue;  // keep the slow transport cases short
      Bytes in = testing::testVector(rank, big, DataType::kFloat32, 1), out(in.size());
      probe.in = in.data();
      probe.out = out.data();
      if (algo)
        runCollective(*comm, probe, name);
      else
        allreduce(*comm, in.data(), out.data(), big, DataType::kFloat32, ReduceOp::kSum);
      if (out != testing::referenceReduce(size, big, DataType::kFloat32, ReduceOp::kSum, 1)) {
        throw std::runtime_error(name + ": wrong result for 1000003 float32");
      }
    }
  });
}

// A postscale gives the bits of reducing, then scaling: inside the shm algorithm's reduction
// (Note [Scaled shm allreduce]), after the others. Every scheme of the shm allreduce (tiny,
// one segment, pipelined over many 16 KiB-slot segments) and every forced algorithm.
TEST_P(CollectivesAllreduce, PostscaleEqualsReduceThenScale) {
  auto [size, topo] = GetParam();
  testing::InProcWorld world(optionsFor(size, topo));
  world.runOk([&](int rank) {
    auto comm = world.makeWorldComm(rank);
    for (DataType t : {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16,
                       DataType::kFloat64, DataType::kInt32}) {
      for (size_t count : {size_t{1}, size_t{7}, size_t{1000}, size_t{5003}, size_t{60001}}) {
        Bytes in = testing::testVector(rank, count, t), out(in.size(), 0xEE);
        const double factor = 1.0 / 3.0;
        allreduce(*comm, in.data(), out.data(), count, t, ReduceOp::kSum, factor);
        Bytes want = testing::referenceReduce(size, count, t, ReduceOp::kSum);
        kernels::scale(want.data(), count, t, factor);
        long bad = testing::firstDifference(out, want, t);
        if (bad >= 0) {
          throw std::runtime_error(PERSEUS_STR("postscale " << dataTypeName(t) << " count " << count
                                                            << ": first wrong element " << bad));
        }
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(SizesAndTopologies, CollectivesAllreduce,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 5),
                                            ::testing::Values(Topo::kArena, Topo::kTransportOnly,
                                                              Topo::kTwoHosts)),
                         [](const auto& info) {
                           return std::to_string(std::get<0>(info.param)) + "_ranks_" +
                                  topoName(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace perseus::collectives
