// Private to src/collectives: helpers shared by the algorithm files.
#pragma once

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/cost_model.h"
#include "collectives/registry.h"
#include "common/reduce_threads.h"

namespace perseus::collectives::detail {

// Runs a collective on a (sub-)communicator as the entry points do, but always by cost
// (PERSEUS_ALLREDUCE_ALGO names the top-level algorithm, not the ones it is built from), with
// the one-rank and empty cases handled.
void run(Communicator& comm, const CollectiveArgs& args);

// Threads this rank may split its share of a shared-memory collective among: the CPUs the
// host's ranks run on over the host's ranks, or PERSEUS_REDUCE_THREADS (Note [Reduce threads]
// in allreduce_shm.cc). This rank's own count: nothing its peers see may depend on it.
inline int ownReduceThreads(const Communicator& comm) {
  const transport::ShmArena& arena = *comm.arena();
  return reduce_threads::requestedReduceThreads(comm.params().reduce_threads, arena.hostCpus(),
                                                arena.localSize());
}

// Splits `count` elements into `parts` contiguous blocks whose starts are multiples of
// `align` elements (the last blocks may be short or empty). Deterministic: every rank gets
// the same split.
struct Blocks {
  Blocks(size_t count, int parts, size_t align = 1) : count_(count) {
    size_t per = (count + parts - 1) / std::max(parts, 1);
    step_ = (per + align - 1) / align * align;
  }
  size_t begin(int b) const { return std::min(count_, step_ * static_cast<size_t>(b)); }
  size_t size(int b) const { return begin(b + 1) - begin(b); }

 private:
  size_t count_;
  size_t step_;
};

// supports() of the algorithms over the transport, which run any call on any communicator.
inline bool anyCall(const Communicator&, const CollectiveArgs&) { return true; }
// supports() of the element-wise allreduce algorithms over the transport: every op but Adasum
// (allreduce_adasum.cc).
inline bool elementwise(const Communicator&, const CollectiveArgs& args) {
  return args.op != ReduceOp::kAdasum;
}

// estimate() of the algorithms that send one message to (or receive one from) each of the p-1
// peers, n bytes in all (pairwise alltoallv, linear gatherv): (p-1)α + nβ.
inline double oneMessagePerPeer(const Communicator& comm, const CollectiveArgs& args) {
  const cost::PointToPoint c = cost::pointToPoint(comm);
  const double bytes = static_cast<double>(args.totalBytes());
  return (comm.size() - 1) * c.alpha_us + bytes * c.beta_us_per_byte;
}

// One step of a ring or pairwise exchange: sends `send_bytes` to `to` while it receives
// `recv_bytes` from `from` (communicator ranks), both progressed at once; an empty side is
// left out, so a peer with nothing to say is not waited for.
inline void exchangeStep(Communicator& comm, int to, const void* send, size_t send_bytes, int from,
                         void* recv, size_t recv_bytes) {
  std::vector<transport::SendOp> sends;
  std::vector<transport::RecvOp> recvs;
  if (send_bytes > 0) sends.push_back({to, send, send_bytes});
  if (recv_bytes > 0) recvs.push_back({from, recv, recv_bytes});
  comm.exchange(std::move(sends), std::move(recvs));
}

// Prefix sums: offsets[i] = v[0] + ... + v[i-1].
inline std::vector<size_t> offsetsOf(const std::vector<size_t>& v, size_t scale = 1) {
  std::vector<size_t> off(v.size() + 1, 0);
  for (size_t i = 0; i < v.size(); ++i) off[i + 1] = off[i] + v[i] * scale;
  return off;
}

inline unsigned char* bytePtr(void* p, size_t off = 0) {
  return static_cast<unsigned char*>(p) + off;
}
inline const unsigned char* bytePtr(const void* p, size_t off = 0) {
  return static_cast<const unsigned char*>(p) + off;
}

}  // namespace perseus::collectives::detail
