// Hierarchical allreduce for communicators that span hosts (Communicator::setHosts):
//   even hosts:   reduce-scatter within the host (arena), allreduce of this rank's block
//                 across hosts among the ranks with the same position, allgather within the
//                 host. Each host link carries 2(H-1)/H of the vector instead of every rank's
//                 2(p-1)/p.
//   uneven hosts: allreduce within the host, allreduce across the first rank of each host,
//                 broadcast within the host.
// PERSEUS_HIERARCHICAL_ALLREDUCE: 0 never, 1 whenever it applies, auto by cost.
#include <cstring>

#include "collectives/cost_model.h"
#include "collectives/detail.h"
#include "collectives/registry.h"

namespace perseus::collectives {
namespace {

bool supports(const Communicator& comm, const CollectiveArgs& args) {
  return args.op != ReduceOp::kAdasum && comm.params().hierarchical_allreduce != "0" &&
         comm.numHosts() > 1 && comm.size() > comm.numHosts();
}

double estimate(const Communicator& comm, const CollectiveArgs& args) {
  if (comm.params().hierarchical_allreduce == "1") return 0.0;
  auto c = cost::pointToPoint(comm);
  double n = static_cast<double>(args.totalBytes());
  double hosts = comm.numHosts();
  double local = static_cast<double>(comm.size()) / hosts;
  double within = 4 * cost::kBarrierUs + 4.0 * n * cost::kArenaUsPerByte;
  double block = comm.hostsEven() ? n / local : n;
  double across =
      2 * (hosts - 1) * c.alpha_us + 2 * (hosts - 1) / hosts * block * c.beta_us_per_byte;
  return within + across;
}

void run(Communicator& comm, const CollectiveArgs& args) {
  Communicator& host = comm.hostComm();
  Communicator& cross = comm.crossComm();
  const size_t esize = args.elementSize();
  CollectiveArgs sub = args;
  if (comm.hostsEven()) {
    const int l = host.size();
    detail::Blocks blocks(args.count, l, std::max<size_t>(1, 64 / esize));
    std::vector<size_t> counts(l), bytes(l);
    for (int i = 0; i < l; ++i) {
      counts[i] = blocks.size(i);
      bytes[i] = counts[i] * esize;
    }
    auto* mine = detail::bytePtr(args.out, blocks.begin(host.rank()) * esize);
    // In place (in == out) the reduce-scatter must not overwrite input that peers still read:
    // it writes only this rank's block, which the arena and ring versions read before writing.
    sub.kind = Collective::kReducescatterv;
    sub.sizes = &counts;
    sub.out = mine;
    detail::run(host, sub);

    sub = args;
    sub.in = mine;
    sub.out = mine;
    sub.count = counts[host.rank()];
    detail::run(cross, sub);

    sub = CollectiveArgs();
    sub.kind = Collective::kAllgatherv;
    sub.in = mine;
    sub.out = args.out;
    sub.sizes = &bytes;
    detail::run(host, sub);
  } else {
    detail::run(host, sub);
    if (host.rank() == 0) {
      sub.in = args.out;
      detail::run(cross, sub);
    }
    sub = CollectiveArgs();
    sub.kind = Collective::kBroadcast;
    sub.in = args.out;
    sub.out = args.out;
    sub.bytes = args.count * esize;
    sub.root = 0;
    detail::run(host, sub);
  }
}

}  // namespace

extern const Algorithm kAllreduceHierarchical = {
    "hierarchical",
    Collective::kAllreduce,
    "reduce within each host, allreduce across hosts, spread within the host; needs hosts set "
    "on the communicator (more than one, one with several ranks)",
    supports,
    estimate,
    run};

}  // namespace perseus::collectives
