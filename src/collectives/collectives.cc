// Entry points: validate, handle the trivial cases every algorithm would repeat (one rank,
// nothing to move), then let the registry pick.
#include "collectives/collectives.h"

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <numeric>

#include "collectives/detail.h"
#include "collectives/registry.h"
#include "common/status.h"
#include "kernels/reduce.h"

namespace perseus::collectives {
namespace {

void checkSizes(const Communicator& comm, const std::vector<size_t>& v, const char* what,
                const char* call) {
  if (v.size() != static_cast<size_t>(comm.size())) {
    throw InvalidArgumentError(PERSEUS_STR(
        call << ": " << what << " has " << v.size() << " entries but the communicator has "
             << comm.size() << " ranks; pass one entry per rank"));
  }
}

void checkRoot(const Communicator& comm, int root, const char* call) {
  if (root < 0 || root >= comm.size()) {
    throw InvalidArgumentError(PERSEUS_STR(call << ": root " << root << " is not a rank of this "
                                                << comm.size() << "-rank communicator"));
  }
}

size_t sum(const std::vector<size_t>& v) { return std::accumulate(v.begin(), v.end(), size_t{0}); }

}  // namespace

namespace detail {

void run(Communicator& comm, const CollectiveArgs& args) {
  if (comm.size() == 1) {
    switch (args.kind) {
      case Collective::kAllreduce:
      case Collective::kAllgatherv:
      case Collective::kAlltoallv:
      case Collective::kReducescatterv:
      case Collective::kGatherv:
        if (args.out != args.in && args.totalBytes() > 0) {
          std::memmove(args.out, args.in, args.totalBytes());
        }
        return;
      case Collective::kBroadcast:
      case Collective::kBarrier:
        return;
    }
  }
  if (args.kind != Collective::kBarrier && args.totalBytes() == 0) return;
  selectAlgorithm(comm, args, std::string()).run(comm, args);
}

}  // namespace detail

extern const Algorithm kAllreduceShm;
extern const Algorithm kAllreduceSingleCopy;
extern const Algorithm kReducescattervShm;
extern const Algorithm kReducescattervSingleCopy;

namespace {

// Runs `args` with the algorithm selected for it (`forced`: a PERSEUS_*_ALGO name, or empty)
// and applies `postscale` to the `count` elements of this rank's result `out`: inside the
// algorithm when it is one of `scaling` (Note [Scaled shm allreduce], Note [Single-copy
// allreduce], Note [Scaled shm reduce-scatter], Note [Single-copy reduce-scatter]), in a pass
// afterwards otherwise. Only a top-level call scales inside: one nested in another algorithm
// (hierarchical) gets a copy of these args with the default postscale of 1.
void runScaled(Communicator& comm, CollectiveArgs args, const std::string& forced,
               std::initializer_list<const Algorithm*> scaling, double postscale, void* out,
               size_t count) {
  bool scaled = false;
  if (comm.size() == 1 || args.totalBytes() == 0) {
    detail::run(comm, args);
  } else {
    const Algorithm& algorithm = selectAlgorithm(comm, args, forced);
    scaled = std::find(scaling.begin(), scaling.end(), &algorithm) != scaling.end();
    if (scaled) args.postscale = postscale;
    algorithm.run(comm, args);
  }
  if (!scaled && postscale != 1.0 && count > 0) kernels::scale(out, count, args.dtype, postscale);
}

// Horovod's conditions for Adasum, checked before any rank moves data.
void checkAdasum(const Communicator& comm, DataType dtype) {
  const int p = comm.size();
  if ((p & (p - 1)) != 0) {
    throw UnsupportedError(
        PERSEUS_STR("Running Adasum with non-power-of-two ranks is not supported yet (this set has "
                    << p << " ranks; Adasum combines them in pairs over log2(size) levels)"));
  }
  if (!isFloatingPoint(dtype)) {
    throw UnsupportedError(
        PERSEUS_STR("Adasum takes float16, bfloat16, float32 or float64 "
                    "tensors, not "
                    << dataTypeName(dtype) << "; use op=Sum or Average"));
  }
}

}  // namespace

void allreduce(Communicator& comm, const void* in, void* out, size_t count, DataType dtype,
               ReduceOp op, double postscale) {
  if (op == ReduceOp::kAverage) {
    throw InvalidArgumentError(
        "allreduce: Average must be turned into Sum plus a postscale before the collective");
  }
  if (op == ReduceOp::kAdasum) checkAdasum(comm, dtype);
  CollectiveArgs args;
  args.kind = Collective::kAllreduce;
  args.in = in;
  args.out = out;
  args.count = count;
  args.dtype = dtype;
  args.op = op;
  // PERSEUS_ALLREDUCE_ALGO picks among the element-wise algorithms; Adasum has one of its own.
  const std::string forced =
      op == ReduceOp::kAdasum ? std::string() : forcedAlgorithm(comm, Collective::kAllreduce);
  runScaled(comm, args, forced, {&kAllreduceShm, &kAllreduceSingleCopy}, postscale, out, count);
}

void allgatherv(Communicator& comm, const void* in, void* out, const std::vector<size_t>& bytes) {
  checkSizes(comm, bytes, "bytes", "allgatherv");
  CollectiveArgs args;
  args.kind = Collective::kAllgatherv;
  args.in = in;
  args.out = out;
  args.sizes = &bytes;
  if (comm.size() == 1) {
    if (out != in && bytes[0] > 0) std::memmove(out, in, bytes[0]);
    return;
  }
  detail::run(comm, args);
}

void broadcast(Communicator& comm, void* data, size_t bytes, int root) {
  checkRoot(comm, root, "broadcast");
  CollectiveArgs args;
  args.kind = Collective::kBroadcast;
  args.in = data;
  args.out = data;
  args.bytes = bytes;
  args.root = root;
  detail::run(comm, args);
}

void alltoallv(Communicator& comm, const void* in, const std::vector<size_t>& send_bytes, void* out,
               const std::vector<size_t>& recv_bytes) {
  checkSizes(comm, send_bytes, "send_bytes", "alltoallv");
  checkSizes(comm, recv_bytes, "recv_bytes", "alltoallv");
  CollectiveArgs args;
  args.kind = Collective::kAlltoallv;
  args.in = in;
  args.out = out;
  args.sizes = &send_bytes;
  args.recv_sizes = &recv_bytes;
  if (comm.size() == 1) {
    if (send_bytes[0] != recv_bytes[0]) {
      throw InvalidArgumentError("alltoallv: on one rank, send_bytes[0] must equal recv_bytes[0]");
    }
    if (out != in && send_bytes[0] > 0) std::memmove(out, in, send_bytes[0]);
    return;
  }
  // Whether anything moves is not known to all ranks alike (each sees only its own row), so
  // there is no empty shortcut here.
  selectAlgorithm(comm, args, std::string()).run(comm, args);
}

void reducescatterv(Communicator& comm, const void* in, void* out,
                    const std::vector<size_t>& counts, DataType dtype, ReduceOp op,
                    double postscale) {
  checkSizes(comm, counts, "counts", "reducescatterv");
  if (op == ReduceOp::kAverage) {
    throw InvalidArgumentError("reducescatterv: Average must be Sum plus a postscale");
  }
  CollectiveArgs args;
  args.kind = Collective::kReducescatterv;
  args.in = in;
  args.out = out;
  args.sizes = &counts;
  args.dtype = dtype;
  args.op = op;
  runScaled(comm, args, forcedAlgorithm(comm, Collective::kReducescatterv),
            {&kReducescattervShm, &kReducescattervSingleCopy}, postscale, out,
            counts[static_cast<size_t>(comm.rank())]);
}

void gatherv(Communicator& comm, const void* in, void* out, const std::vector<size_t>& bytes,
             int root) {
  checkSizes(comm, bytes, "bytes", "gatherv");
  checkRoot(comm, root, "gatherv");
  CollectiveArgs args;
  args.kind = Collective::kGatherv;
  args.in = in;
  args.out = out;
  args.sizes = &bytes;
  args.root = root;
  if (comm.size() == 1) {
    if (out != in && bytes[0] > 0) std::memmove(out, in, bytes[0]);
    return;
  }
  if (sum(bytes) == 0) return;
  selectAlgorithm(comm, args, std::string()).run(comm, args);
}

void barrier(Communicator& comm) {
  if (comm.size() == 1) return;
  CollectiveArgs args;
  args.kind = Collective::kBarrier;
  selectAlgorithm(comm, args, std::string()).run(comm, args);
}

}  // namespace perseus::collectives
