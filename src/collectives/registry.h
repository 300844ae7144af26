// The algorithm table. Each collective has an ordered list of algorithms; each entry says
// whether it can run a call (supports), what it would cost (estimate, µs, from the α-β-γ
// model in cost_model.h) and runs it. The cheapest supported entry runs; PERSEUS_ALLREDUCE_ALGO
// (Params::allreduce_algo) forces one by name, PERSEUS_REDUCESCATTER_ALGO a reduce-scatter's. The
// choice is logged at DEBUG.
//
// Every member must select the same algorithm, so supports() and estimate() may depend only on
// what all members share: the communicator's shape and the call's arguments (never on this
// rank's pointers or timings).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "common/dtype.h"

namespace perseus::collectives {

enum class Collective {
  kAllreduce,
  kAllgatherv,
  kBroadcast,
  kAlltoallv,
  kReducescatterv,
  kGatherv,
  kBarrier
};
const char* collectiveName(Collective c);

// One call's arguments, type-erased. Which fields are meaningful depends on `kind` (see
// collectives.h for each collective's contract).
struct CollectiveArgs {
  Collective kind = Collective::kAllreduce;
  const void* in = nullptr;
  void* out = nullptr;  // broadcast: the data (in and out)
  size_t count = 0;     // allreduce: elements
  DataType dtype = DataType::kUInt8;
  ReduceOp op = ReduceOp::kSum;
  const std::vector<size_t>* sizes = nullptr;       // allgatherv/gatherv/alltoallv(send): bytes;
                                                    // reducescatterv: element counts
  const std::vector<size_t>* recv_sizes = nullptr;  // alltoallv: bytes received from each peer
  size_t bytes = 0;                                 // broadcast: bytes
  int root = 0;                                     // broadcast, gatherv
  double postscale = 1.0;  // allreduce, reducescatterv: set only for their shm algorithms,
                           // which apply it (collectives::allreduce and ::reducescatterv
                           // scale for the others)

  size_t elementSize() const { return dataTypeSize(dtype); }
  // Bytes of the whole vector this call moves per rank (the "S" of the cost model).
  size_t totalBytes() const;
};

struct Algorithm {
  const char* name;  // unique per collective, e.g. "ring"; what PERSEUS_ALLREDUCE_ALGO takes
  Collective kind;
  const char* description;
  bool (*supports)(const Communicator& comm, const CollectiveArgs& args);
  double (*estimate)(const Communicator& comm, const CollectiveArgs& args);  // µs
  void (*run)(Communicator& comm, const CollectiveArgs& args);
};

// Every registered algorithm, grouped by collective.
const std::vector<const Algorithm*>& allAlgorithms();
const Algorithm* findAlgorithm(Collective kind, const std::string& name);

// The algorithm that runs `args` on `comm`: `forced` if non-empty and not "auto" (throws
// InvalidArgumentError if it names no algorithm of this collective, UnsupportedError if it
// cannot run this call), else the cheapest supported one.
const Algorithm& selectAlgorithm(const Communicator& comm, const CollectiveArgs& args,
                                 const std::string& forced);

// The algorithm the environment forces for `kind` (PERSEUS_ALLREDUCE_ALGO,
// PERSEUS_REDUCESCATTER_ALGO), or empty / "auto".
std::string forcedAlgorithm(const Communicator& comm, Collective kind);

// Selects (honouring forcedAlgorithm) and runs.
void runCollective(Communicator& comm, const CollectiveArgs& args);
// Runs the named algorithm (tests and benchmarks); same errors as selectAlgorithm.
void runCollective(Communicator& comm, const CollectiveArgs& args, const std::string& algorithm);

}  // namespace perseus::collectives
