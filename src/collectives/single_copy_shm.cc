// Broadcast, allgatherv and reducescatterv by single-copy reads (transport/shm/cross_memory.h):
// each member publishes its process id and the address of its buffer in its own slot; after a
// barrier, every reader copies what it needs straight out of the other members' memory, one
// pass over the data where the slot algorithms (broadcast_shm.cc, allgather_shm.cc,
// reducescatter_shm.cc) make two, into a slot and out of it. This is how Open MPI's vader
// transport moves large messages.
//
// Note [Single-copy reduce-scatter]: member r reads block r of each peer's input, a piece of
// kReducePieceBytes per peer at a time, into a scratch that stays in cache, and reduces the
// pieces with its own block in rank order (the slot algorithm's order, so the same bits) into
// `out`. Each member moves its block once per peer and writes its output once, where the slot
// algorithm copies its whole input into the slots and reduces out of them; and it passes three
// barriers where that one passes one per slot-sized round. Nothing is written before the
// members agreed that all of them can read (a one-element read of each peer, the second
// barrier), so a refusal falls back to the slots with the input untouched (`out` may alias this
// member's block of it, as in the slot algorithm); a read failing after that agreement fails
// the call on every member (the third barrier is a barrierMax too).
//
// The closing barrier is a barrierMax of "this member could not read": the writers' buffers
// stay untouched until everyone has read them, and every member learns whether someone could
// not (the system forbids cross-memory attach, or PERSEUS_SHM_SINGLE_COPY=0 there), in which
// case all of them run the slot algorithm instead, then and in every later call on the
// communicator (a refusal or the system's policy does not change). Members only read peers'
// slots between the two barriers and write their own before the first (Note [Arena slot
// discipline], arena_view.h), so the fallback starts cleanly.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "collectives/arena_view.h"
#include "collectives/collectives.h"
#include "collectives/cost_model.h"
#include "collectives/detail.h"
#include "collectives/registry.h"
#include "common/logging.h"
#include "common/status.h"
#include "kernels/reduce.h"
#include "transport/shm/cross_memory.h"

namespace perseus::collectives {

extern const Algorithm kBroadcastShm;
extern const Algorithm kAllgathervShm;
extern const Algorithm kReducescattervShm;

namespace {

std::atomic<uint64_t> g_fallbacks{0};
std::atomic<bool> g_warned{false};

// Every member runs this when the members agreed to fall back; `err`: this member's failed
// read (0 when another member failed or this one refused).
void fallBack(Communicator& comm, const CollectiveArgs& args, const Algorithm& slots, int err) {
  g_fallbacks.fetch_add(1, std::memory_order_relaxed);
  comm.setSingleCopyFailed();
  if (err != 0 && !g_warned.exchange(true, std::memory_order_relaxed)) {
    PERSEUS_LOG(WARNING, kCollectives)
        << "rank " << comm.globalRank(comm.rank()) << ": cannot read a local peer's memory ("
        << std::strerror(err) << ", in a " << collectiveName(args.kind)
        << "); large broadcasts, allgathers and reduce-scatters go through the shared-memory "
           "slots instead (two copies instead of one)";
  }
  slots.run(comm, args);
}

struct Published {
  uint64_t pid;
  uint64_t address;
};

void publish(const detail::ArenaView& view, int rank, const void* buffer) {
  const Published p{static_cast<uint64_t>(::getpid()), reinterpret_cast<uintptr_t>(buffer)};
  std::memcpy(view.half(rank, 0), &p, sizeof p);
}

// Copies `bytes` of member `q`'s published buffer, from byte `from` on, to `to`; 0 or the errno.
int readFrom(const detail::ArenaView& view, int q, void* to, size_t bytes, size_t from = 0) {
  Published p;
  std::memcpy(&p, view.half(q, 0), sizeof p);
  return transport::shm::readPeerMemory(static_cast<pid_t>(p.pid),
                                        reinterpret_cast<const void*>(p.address + from), to, bytes);
}

bool supports(const Communicator& comm, const CollectiveArgs&) {
  return comm.arena() != nullptr && !comm.singleCopyFailed();
}

double broadcastEstimate(const Communicator&, const CollectiveArgs& args) {
  return 2 * cost::kBarrierUs + cost::kCrossMemoryUs +
         static_cast<double>(args.bytes) * cost::kCrossMemoryUsPerByte;
}

void broadcastRun(Communicator& comm, const CollectiveArgs& args) {
  detail::ArenaView view(comm);
  const bool refuse = !comm.params().shm_single_copy;
  if (comm.rank() == args.root) publish(view, comm.rank(), args.out);
  view.barrier();
  const int err =
      refuse || comm.rank() == args.root ? 0 : readFrom(view, args.root, args.out, args.bytes);
  if (view.barrierMax(refuse || err != 0 ? 1 : 0) != 0) fallBack(comm, args, kBroadcastShm, err);
}

double allgatherEstimate(const Communicator& comm, const CollectiveArgs& args) {
  // Each member reads the others' pieces; the slowest reads all but the smallest.
  const size_t smallest = *std::min_element(args.sizes->begin(), args.sizes->end());
  return 2 * cost::kBarrierUs + (comm.size() - 1) * cost::kCrossMemoryUs +
         static_cast<double>(args.totalBytes() - smallest) * cost::kCrossMemoryUsPerByte;
}

void allgatherRun(Communicator& comm, const CollectiveArgs& args) {
  detail::ArenaView view(comm);
  const int p = comm.size(), r = comm.rank();
  const auto& bytes = *args.sizes;
  const auto off = detail::offsetsOf(bytes);
  auto* out = detail::bytePtr(args.out);
  publish(view, r, args.in);
  view.barrier();
  const bool refuse = !comm.params().shm_single_copy;
  int err = 0;
  for (int k = 1; k < p && !refuse && err == 0; ++k) {
    const int q = (r + k) % p;  // members start at different peers
    if (bytes[q] > 0) err = readFrom(view, q, out + off[q], bytes[q]);
  }
  const auto* in = detail::bytePtr(args.in);
  const bool failed = refuse || err != 0;
  if (!failed && bytes[r] > 0 && out + off[r] != in) std::memmove(out + off[r], in, bytes[r]);
  if (view.barrierMax(failed ? 1 : 0) != 0) fallBack(comm, args, kAllgathervShm, err);
}

// Note [Single-copy reduce-scatter]: each peer's piece and the reduction of all of them stay in
// a core's L2.
constexpr size_t kReducePieceBytes = 256 * 1024;

size_t pieceCount(size_t bytes) { return (bytes + kReducePieceBytes - 1) / kReducePieceBytes; }

double reducescatterEstimate(const Communicator& comm, const CollectiveArgs& args) {
  // The slowest member reads the largest block from every peer and writes it once.
  const size_t largest =
      *std::max_element(args.sizes->begin(), args.sizes->end()) * args.elementSize();
  const double peers = comm.size() - 1;
  return 3 * cost::kBarrierUs +
         peers * static_cast<double>(pieceCount(largest)) * cost::kCrossMemoryUs +
         static_cast<double>(largest) *
             (peers * cost::kCrossMemoryUsPerByte + cost::kArenaUsPerByte);
}

// Reads and reduces block r (Note [Single-copy reduce-scatter]); 0 or the errno of a read.
int reduceOwnBlock(const detail::ArenaView& view, const CollectiveArgs& args,
                   const std::vector<size_t>& off, int p, int r) {
  const size_t esize = args.elementSize();
  const size_t piece_elems = kReducePieceBytes / esize;
  const size_t count = (*args.sizes)[r];
  thread_local std::vector<unsigned char> scratch;
  scratch.resize(kReducePieceBytes * static_cast<size_t>(p));
  std::vector<const void*> srcs(p);
  const auto* mine = detail::bytePtr(args.in, off[r]);
  for (size_t done = 0; done < count; done += piece_elems) {
    const size_t n = std::min(piece_elems, count - done);
    for (int q = 0; q < p; ++q) {
      if (q == r) {
        srcs[q] = mine + done * esize;
        continue;
      }
      unsigned char* to = scratch.data() + static_cast<size_t>(q) * kReducePieceBytes;
      if (int err = readFrom(view, q, to, n * esize, off[r] + done * esize)) return err;
      srcs[q] = to;
    }
    kernels::reduceN(detail::bytePtr(args.out, done * esize), srcs.data(), p, n, args.dtype,
                     args.op);
  }
  return 0;
}

void reducescatterRun(Communicator& comm, const CollectiveArgs& args) {
  detail::ArenaView view(comm);
  const int p = comm.size(), r = comm.rank();
  const size_t esize = args.elementSize();
  const auto off = detail::offsetsOf(*args.sizes, esize);
  publish(view, r, args.in);
  view.barrier();
  const bool refuse = !comm.params().shm_single_copy;
  int err = 0;
  unsigned char probe[16];
  for (int k = 1; k < p && !refuse && err == 0 && (*args.sizes)[r] > 0; ++k) {
    err = readFrom(view, (r + k) % p, probe, esize, off[r]);
  }
  if (view.barrierMax(refuse || err != 0 ? 1 : 0) != 0) {
    fallBack(comm, args, kReducescattervShm, err);
    return;
  }
  err = reduceOwnBlock(view, args, off, p, r);
  if (view.barrierMax(err != 0 ? 1 : 0) != 0) {
    throw InternalError(
        PERSEUS_STR("reducescatterv: rank "
                    << comm.globalRank(r)
                    << (err != 0 ? std::string(": cannot read a local peer's memory (") +
                                       std::strerror(err) + ")"
                                 : std::string(": a local peer could not read"))
                    << " in a reduce-scatter whose ranks had all read each other's memory "
                       "when it started; set PERSEUS_SHM_SINGLE_COPY=0 on every rank to send "
                       "reduce-scatters through the shared-memory slots"));
  }
}

}  // namespace

uint64_t singleCopyFallbacks() { return g_fallbacks.load(std::memory_order_relaxed); }

extern const Algorithm kBroadcastSingleCopy = {
    "single-copy",
    Collective::kBroadcast,
    "every member copies straight from the root's memory (cross-memory attach); needs every "
    "member on this host",
    supports,
    broadcastEstimate,
    broadcastRun};

extern const Algorithm kAllgathervSingleCopy = {
    "single-copy",
    Collective::kAllgatherv,
    "every member copies each peer's piece straight from its memory (cross-memory attach); "
    "needs every member on this host",
    supports,
    allgatherEstimate,
    allgatherRun};

extern const Algorithm kReducescattervSingleCopy = {
    "single-copy",
    Collective::kReducescatterv,
    "every member reads its block of each peer's input straight from that peer's memory "
    "(cross-memory attach) and reduces it in cache; needs every member on this host",
    supports,
    reducescatterEstimate,
    reducescatterRun};

}  // namespace perseus::collectives
