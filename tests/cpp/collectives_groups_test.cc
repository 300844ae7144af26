// Communicators over subsets and overlapping groups (arena slot discipline), algorithm
// forcing and its errors, and the collectives over the real shared-memory transport and arena.
#include <gtest/gtest.h>

#include "collectives/collectives.h"
#include "collectives/registry.h"
#include "common/status.h"
#include "support/inproc_values.h"
#include "support/inproc_world.h"
#include "support/shm_groups.h"

namespace perseus::collectives {
namespace {

using testing::Bytes;

void checkAllreduce(Communicator& comm, size_t count, uint32_t seed, const char* what) {
  // Rank values are keyed by the communicator rank, so the reference is over comm.size().
  Bytes in = testing::testVector(comm.rank(), count, DataType::kFloat32, seed), out(in.size());
  allreduce(comm, in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum);
  if (out !=
      testing::referenceReduce(comm.size(), count, DataType::kFloat32, ReduceOp::kSum, seed)) {
    throw std::runtime_error(
        PERSEUS_STR(what << ": wrong allreduce of " << count << " on rank " << comm.rank()));
  }
}

TEST(CollectivesGroups, SubsetAndOverlappingGroupsInterleaved) {
  testing::InProcWorldOptions o;
  o.size = 4;
  o.slot_bytes = 8192;
  testing::InProcWorld world(o);
  world.runOk([&](int r) {
    auto all = world.makeWorldComm(r);
    std::unique_ptr<Communicator> a, b;  // a = {0,1,2}, b = {3,1} (unsorted order on purpose)
    if (r != 3) a = world.makeComm(r, {0, 1, 2}, 1);
    if (r == 1 || r == 3) b = world.makeComm(r, {3, 1}, 2);
    for (int iter = 0; iter < 30; ++iter) {
      size_t count = 1 + static_cast<size_t>(iter) * 997;
      if (a) checkAllreduce(*a, count, iter, "group {0,1,2}");
      if (b) checkAllreduce(*b, count + 3, iter, "group {3,1}");
      if (iter % 5 == 0) checkAllreduce(*all, count, iter, "world");
    }
  });
}

TEST(CollectivesGroups, ForcedAlgorithmErrors) {
  testing::InProcWorldOptions o;
  o.size = 2;
  o.with_arena = false;
  o.params.allreduce_algo = "shm";
  testing::InProcWorld world(o);
  auto errors = world.run([&](int r) {
    auto comm = world.makeWorldComm(r);
    float x = 1;
    EXPECT_THROW(allreduce(*comm, &x, &x, 1, DataType::kFloat32, ReduceOp::kSum), UnsupportedError);
    CollectiveArgs args;
    args.count = 1;
    args.dtype = DataType::kFloat32;
    EXPECT_THROW(selectAlgorithm(*comm, args, "no_such_algo"), InvalidArgumentError);
    EXPECT_EQ(std::string(selectAlgorithm(*comm, args, "ring").name), "ring");
  });
  for (auto& e : errors) EXPECT_EQ(e, "");
}

TEST(CollectivesGroups, HierarchicalUnevenHosts) {
  testing::InProcWorldOptions o;
  o.size = 5;
  o.host_of_rank = {0, 0, 0, 1, 1};
  o.params.hierarchical_allreduce = "1";
  testing::InProcWorld world(o);
  world.runOk([&](int r) {
    auto comm = world.makeWorldComm(r);
    for (size_t count : {size_t{1}, size_t{1001}, size_t{70001}})
      checkAllreduce(*comm, count, 4, "hierarchical");
  });
}

TEST(CollectivesGroups, RealSharedMemoryTransportAndArena) {
  const int n = 3;
  auto errors = testing::runOnShmCommunicators(
      n, "coll" + std::to_string(::getpid()), testing::shmTestParams(),
      [&](int r, Communicator& comm) {
        for (const Algorithm* a : allAlgorithms()) {
          if (a->kind != Collective::kAllreduce || !a->supports(comm, CollectiveArgs())) continue;
          for (size_t count : {size_t{1}, size_t{4099}, size_t{300007}}) {
            Bytes in = testing::testVector(r, count, DataType::kBFloat16), out(in.size());
            CollectiveArgs args;
            args.in = in.data();
            args.out = out.data();
            args.count = count;
            args.dtype = DataType::kBFloat16;
            runCollective(comm, args, a->name);
            if (out != testing::referenceReduce(n, count, DataType::kBFloat16, ReduceOp::kSum)) {
              throw std::runtime_error(std::string("wrong result from ") + a->name);
            }
          }
        }
        std::vector<size_t> bytes = {5, 70000, 0};
        Bytes mine = testing::testBytes(r, bytes[r]), all(70005);
        allgatherv(comm, mine.data(), all.data(), bytes);
        Bytes want = testing::testBytes(0, 5), b1 = testing::testBytes(1, 70000);
        want.insert(want.end(), b1.begin(), b1.end());
        if (all != want) throw std::runtime_error("wrong allgatherv");
        barrier(comm);
      });
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

}  // namespace
}  // namespace perseus::collectives
