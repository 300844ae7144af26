#include "collectives/registry.h"

#include <limits>
#include <numeric>

#include "common/logging.h"
#include "common/status.h"

namespace perseus::collectives {

// Each algorithm file defines one of these; the list below is the registration (explicit, so
// that linking the static library cannot drop an algorithm).
extern const Algorithm kAllreduceRing;
extern const Algorithm kAllreduceRecursiveDoubling;
extern const Algorithm kAllreduceShm;
extern const Algorithm kAllreduceSingleCopy;
extern const Algorithm kAllreduceHierarchical;
extern const Algorithm kAllreduceAdasum;
extern const Algorithm kAllgathervRing;
extern const Algorithm kAllgathervShm;
extern const Algorithm kBroadcastBinomial;
extern const Algorithm kBroadcastChain;
extern const Algorithm kBroadcastShm;
extern const Algorithm kBroadcastSingleCopy;
extern const Algorithm kAllgathervSingleCopy;
extern const Algorithm kAlltoallvPairwise;
extern const Algorithm kReducescattervRing;
extern const Algorithm kReducescattervShm;
extern const Algorithm kReducescattervSingleCopy;
extern const Algorithm kGathervLinear;
extern const Algorithm kBarrierDissemination;
extern const Algorithm kBarrierShm;

const char* collectiveName(Collective c) {
  switch (c) {
    case Collective::kAllreduce:
      return "allreduce";
    case Collective::kAllgatherv:
      return "allgatherv";
    case Collective::kBroadcast:
      return "broadcast";
    case Collective::kAlltoallv:
      return "alltoallv";
    case Collective::kReducescatterv:
      return "reducescatterv";
    case Collective::kGatherv:
      return "gatherv";
    case Collective::kBarrier:
      return "barrier";
  }
  return "unknown";
}

size_t CollectiveArgs::totalBytes() const {
  switch (kind) {
    case Collective::kAllreduce:
      return count * elementSize();
    case Collective::kBroadcast:
      return bytes;
    case Collective::kReducescatterv:
      return sizes ? std::accumulate(sizes->begin(), sizes->end(), size_t{0}) * elementSize() : 0;
    case Collective::kAllgatherv:
    case Collective::kGatherv:
    case Collective::kAlltoallv:
      return sizes ? std::accumulate(sizes->begin(), sizes->end(), size_t{0}) : 0;
    case Collective::kBarrier:
      return 0;
  }
  return 0;
}

const std::vector<const Algorithm*>& allAlgorithms() {
  static const std::vector<const Algorithm*> table = {
      &kAllreduceShm,
      &kAllreduceSingleCopy,
      &kAllreduceHierarchical,
      &kAllreduceRing,
      &kAllreduceRecursiveDoubling,
      &kAllreduceAdasum,
      &kAllgathervShm,
      &kAllgathervSingleCopy,
      &kAllgathervRing,
      &kBroadcastShm,
      &kBroadcastSingleCopy,
      &kBroadcastBinomial,
      &kBroadcastChain,
      &kAlltoallvPairwise,
      &kReducescattervShm,
      &kReducescattervSingleCopy,
      &kReducescattervRing,
      &kGathervLinear,
      &kBarrierShm,
      &kBarrierDissemination,
  };
  return table;
}

const Algorithm* findAlgorithm(Collective kind, const std::string& name) {
  for (const Algorithm* a : allAlgorithms()) {
    if (a->kind == kind && name == a->name) return a;
  }
  return nullptr;
}

namespace {

std::string namesOf(Collective kind) {
  std::string names;
  for (const Algorithm* a : allAlgorithms()) {
    if (a->kind != kind) continue;
    if (!names.empty()) names += ", ";
    names += a->name;
  }
  return names;
}

}  // namespace

const Algorithm& selectAlgorithm(const Communicator& comm, const CollectiveArgs& args,
                                 const std::string& forced) {
  if (!forced.empty() && forced != "auto") {
    const Algorithm* a = findAlgorithm(args.kind, forced);
    if (a == nullptr) {
      throw InvalidArgumentError(
          PERSEUS_STR("no " << collectiveName(args.kind) << " algorithm is named '" << forced
                            << "'; choose one of: auto, " << namesOf(args.kind)));
    }
    if (!a->supports(comm, args)) {
      throw UnsupportedError(
          PERSEUS_STR(collectiveName(args.kind)
                      << " algorithm '" << forced << "' cannot run this call (" << comm.size()
                      << " ranks, " << args.totalBytes() << " bytes"
                      << (comm.arena() ? ", one host" : "") << "): " << a->description << ". Unset "
                      << (args.kind == Collective::kReducescatterv ? "PERSEUS_REDUCESCATTER_ALGO"
                                                                   : "PERSEUS_ALLREDUCE_ALGO")
                      << " or pick another"));
    }
    return *a;
  }
  const Algorithm* best = nullptr;
  double best_us = std::numeric_limits<double>::infinity();
  for (const Algorithm* a : allAlgorithms()) {
    if (a->kind != args.kind || !a->supports(comm, args)) continue;
    double us = a->estimate(comm, args);
    if (us < best_us) {
      best_us = us;
      best = a;
    }
  }
  PERSEUS_CHECK(best != nullptr, "no " << collectiveName(args.kind) << " algorithm supports "
                                       << comm.size() << " ranks");
  PERSEUS_LOG(DEBUG, kCollectives)
      << collectiveName(args.kind) << " of " << args.totalBytes() << " bytes over " << comm.size()
      << " ranks: " << best->name << " (estimated " << best_us << " us)";
  return *best;
}

void runCollective(Communicator& comm, const CollectiveArgs& args) {
  selectAlgorithm(comm, args, forcedAlgorithm(comm, args.kind)).run(comm, args);
}

std::string forcedAlgorithm(const Communicator& comm, Collective kind) {
  if (kind == Collective::kAllreduce) return comm.params().allreduce_algo;
  if (kind == Collective::kReducescatterv) return comm.params().reducescatter_algo;
  return std::string();
}

void runCollective(Communicator& comm, const CollectiveArgs& args, const std::string& algorithm) {
  selectAlgorithm(comm, args, algorithm).run(comm, args);
}

}  // namespace perseus::collectives
