// Runs only under mpirun (CTest: `mpirun -np 2 mpi_collectives_check`, tests/cpp/CMakeLists.txt):
// bootstraps with PERSEUS_CPU_OPERATIONS=mpi, so every byte between ranks goes through the MPI
// channels (src/transport/mpi/), and checks allreduce (every allreduce algorithm that runs
// without an arena, sizes around the channels' 256 KiB chunks), allgatherv with uneven sizes,
// broadcast from the last rank, alltoallv and a barrier. Exit code 0 when every rank's results
// are right; each failure prints the rank and what differed.
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>

#include "collectives/collectives.h"
#include "collectives/registry.h"
#include "rendezvous/world.h"
#include "support/inproc_values.h"

using namespace perseus;

namespace {

int failures = 0;

void expect(bool ok, int rank, const std::string& what) {
  if (ok) return;
  ++failures;
  std::fprintf(stderr, "rank %d: FAILED %s\n", rank, what.c_str());
}

void checkAllreduce(collectives::Communicator& comm, const std::string& algo, size_t count) {
  const int r = comm.rank(), n = comm.size();
  auto in = testing::testVector(r, count, DataType::kFloat32, 3);
  testing::Bytes out(in.size(), 0xEE);
  collectives::CollectiveArgs args;
  args.in = in.data();
  args.out = out.data();
  args.count = count;
  args.dtype = DataType::kFloat32;
  collectives::runCollective(comm, args, algo);
  auto want = testing::referenceReduce(n, count, DataType::kFloat32, ReduceOp::kSum, 3);
  expect(testing::firstDifference(out, want, DataType::kFloat32) < 0, r,
         "allreduce " + algo + " of " + std::to_string(count) + " float32");
}

void checkMovement(collectives::Communicator& comm) {
  const int r = comm.rank(), n = comm.size();
  // allgatherv: rank q contributes 100000 * (q + 1) + 3 bytes.
  std::vector<size_t> sizes(n);
  for (int q = 0; q < n; ++q) sizes[q] = 100000 * (q + 1) + 3;
  auto mine = testing::testBytes(r, sizes[r], 5);
  testing::Bytes gathered(std::accumulate(sizes.begin(), sizes.end(), size_t{0}));
  collectives::allgatherv(comm, mine.data(), gathered.data(), sizes);
  size_t off = 0;
  for (int q = 0; q < n; ++q) {
    auto theirs = testing::testBytes(q, sizes[q], 5);
    expect(std::equal(theirs.begin(), theirs.end(), gathered.begin() + off), r,
           "allgatherv block of rank " + std::to_string(q));
    off += sizes[q];
  }
  // broadcast 1 MiB + 1 from the last rank.
  const int root = n - 1;
  auto want = testing::testBytes(root, (1 << 20) + 1, 7);
  testing::Bytes data = r == root ? want : testing::Bytes(want.size(), 0);
  collectives::broadcast(comm, data.data(), data.size(), root);
  expect(data == want, r, "broadcast from rank " + std::to_string(root));
  // alltoallv: rank r sends 1000 * (r + 1) + p bytes to peer p.
  std::vector<size_t> send(n), recv(n);
  for (int p = 0; p < n; ++p) {
    send[p] = 1000 * (r + 1) + p;
    recv[p] = 1000 * (p + 1) + r;
  }
  testing::Bytes in, out(std::accumulate(recv.begin(), recv.end(), size_t{0}));
  for (int p = 0; p < n; ++p) {
    auto piece = testing::testBytes(r * 100 + p, send[p], 9);
    in.insert(in.end(), piece.begin(), piece.end());
  }
  collectives::alltoallv(comm, in.data(), send, out.data(), recv);
  off = 0;
  for (int p = 0; p < n; ++p) {
    auto piece = testing::testBytes(p * 100 + r, recv[p], 9);
    expect(std::equal(piece.begin(), piece.end(), out.begin() + off), r,
           "alltoallv piece from rank " + std::to_string(p));
    off += recv[p];
  }
  collectives::barrier(comm);
}

}  // namespace

int main() {
  setenv("PERSEUS_CPU_OPERATIONS", "mpi", 1);
  int rank = -1;
  try {
    Params params = Params::fromEnvironment();
    auto world = rendezvous::bootstrap(params);
    rank = world->topology.rank;
    if (world->arena != nullptr) {
      std::fprintf(stderr, "rank %d: FAILED the MPI data plane must not build an arena\n", rank);
      return 1;
    }
    std::vector<int> members(world->topology.size);
    std::iota(members.begin(), members.end(), 0);
    collectives::Communicator comm(world->transport.get(), nullptr, members, 0, params);
    for (const std::string algo : {"auto", "ring", "recursive_doubling"}) {
      for (size_t count : {size_t{1}, size_t{1000}, size_t{65536}, size_t{300001}}) {
        checkAllreduce(comm, algo, count);
      }
    }
    checkMovement(comm);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: FAILED with exception: %s\n", rank, e.what());
    return 1;
  }
  if (failures == 0) std::printf("rank %d: all MPI data-plane checks passed\n", rank);
  return failures == 0 ? 0 : 1;
}
