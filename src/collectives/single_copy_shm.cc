// Broadcast and allgatherv by single-copy reads (transport/shm/cross_memory.h): each member
// publishes its process id and the address of its buffer in its own slot; after a barrier,
// every reader copies what it needs straight out of the other members' memory, one pass over
// the data where the slot algorithms (broadcast_shm.cc, allgather_shm.cc) make two, into a
// slot and out of it. This is how Open MPI's vader transport moves large messages.
//
// The closing barrier is a barrierMax of "this member could not read": the writers' buffers
// stay untouched until everyone has read them, and every member learns whether someone could
// not (the system forbids cross-memory attach, or PERSEUS_SHM_SINGLE_COPY=0 there), in which
// case all of them run the slot algorithm instead, then and in every later call on the
// communicator (a refusal or the system's policy does not change). Members only read peers'
// slots between the two barriers and write their own before the first (Note [Arena slot
// discipline], arena_view.h), so the fallback starts cleanly.
#include <algorithm>
#include <cstring>
#include <vector>

#include "collectives/arena_view.h"
#include "collectives/cost_model.h"
#include "collectives/detail.h"
#include "collectives/registry.h"
#include "collectives/single_copy.h"

namespace perseus::collectives {

extern const Algorithm kBroadcastShm;
extern const Algorithm kAllgathervShm;

namespace {

using single_copy::fallBack;
using single_copy::publish;
using single_copy::readPeers;
using single_copy::readThreads;

// Both algorithms publish one buffer: the broadcast's output, the allgather's input.
constexpr int kBuffer = 0;

bool supports(const Communicator& comm, const CollectiveArgs&) {
  return comm.arena() != nullptr && !comm.singleCopyFailed();
}

// Note [Broadcast in parts]: readers of one process's memory slow each other down far more
// than readers of different processes. A broadcast's 3 readers each copying the whole message
// out of the root took several times as long as 1 reader, and starting each reader at a
// different page of it did not help; an allgather's readers, each starting at a different
// peer, do not slow down so. So with more than one reader the message is read in two rounds,
// a scatter and an allgather: reader i copies part i (one part per reader) from the root, then
// the other parts from the readers that copied them, each reader starting at a different one.
// The root's memory is read once in all, and each reader still copies the message once.
constexpr size_t kPageBytes = 4096;

// Where part i of `parts` starts: whole pages to each reader, the rest to the last one.
size_t partStart(size_t bytes, int parts, int i) {
  if (i == parts) return bytes;
  const size_t split = bytes / static_cast<size_t>(parts) * static_cast<size_t>(i);
  return split - split % kPageBytes;
}

// Which part member q reads from the root (Note [Broadcast in parts]).
int partOf(int q, int root, int p) { return (q - root - 1 + p) % p; }

// The most a broadcast reader reads in one round: the last part, or the whole message.
size_t broadcastRoundBytes(const Communicator& comm, size_t bytes) {
  const int parts = comm.size() - 1;
  return bytes - partStart(bytes, parts, parts - 1);
}

// Every member counts the same threads (the host's CPUs over its ranks, or the job's
// PERSEUS_REDUCE_THREADS), so every member picks the same broadcast algorithm.
double broadcastEstimate(const Communicator& comm, const CollectiveArgs& args) {
  const int rounds = comm.size() > 2 ? 2 : 1;
  return (rounds + 1) * cost::kBarrierUs + rounds * cost::kCrossMemoryUs +
         static_cast<double>(args.bytes) * cost::kCrossMemoryUsPerByte /
             readThreads(comm, broadcastRoundBytes(comm, args.bytes));
}

// One round of a broadcast in parts: this member's own part from the root (`from_root`), or
// every other reader's part from that reader.
int readBroadcastRound(Communicator& comm, const detail::ArenaView& view, unsigned char* out,
                       const CollectiveArgs& args, bool from_root) {
  const int p = comm.size(), r = comm.rank();
  std::vector<size_t> from(static_cast<size_t>(p), 0), bytes(from.size(), 0);
  auto take = [&](int source, int reader) {
    const int part = partOf(reader, args.root, p);
    from[static_cast<size_t>(source)] = partStart(args.bytes, p - 1, part);
    bytes[static_cast<size_t>(source)] =
        partStart(args.bytes, p - 1, part + 1) - from[static_cast<size_t>(source)];
  };
  if (from_root) {
    take(args.root, r);
  } else {
    for (int q = 0; q < p; ++q) {
      if (q != args.root && q != r) take(q, q);
    }
  }
  return readPeers(comm, view, kBuffer, out, from, from, bytes);
}

void broadcastRun(Communicator& comm, const CollectiveArgs& args) {
  detail::ArenaView view(comm);
  const bool refuse = !comm.params().shm_single_copy;
  const bool root = comm.rank() == args.root;
  auto* out = detail::bytePtr(args.out);
  publish(view, comm.rank(), args.out);
  view.barrier();
  int err = refuse || root ? 0 : readBroadcastRound(comm, view, out, args, true);
  bool failed = refuse || err != 0;
  if (comm.size() > 2) {  // the second round, once every part has been read
    failed = view.barrierMax(failed ? 1 : 0) != 0;
    if (!failed && !root) err = readBroadcastRound(comm, view, out, args, false);
    failed = failed || err != 0;
  }
  if (view.barrierMax(failed ? 1 : 0) != 0) fallBack(comm, args, kBroadcastShm, err);
}

double allgatherEstimate(const Communicator& comm, const CollectiveArgs& args) {
  // Each member reads the others' pieces; the slowest reads all but the smallest.
  const size_t smallest = *std::min_element(args.sizes->begin(), args.sizes->end());
  return 2 * cost::kBarrierUs + (comm.size() - 1) * cost::kCrossMemoryUs +
         static_cast<double>(args.totalBytes() - smallest) * cost::kCrossMemoryUsPerByte;
}

void allgatherRun(Communicator& comm, const CollectiveArgs& args) {
  detail::ArenaView view(comm);
  const int r = comm.rank();
  const auto& bytes = *args.sizes;
  const auto off = detail::offsetsOf(bytes);
  auto* out = detail::bytePtr(args.out);
  publish(view, r, args.in);
  view.barrier();
  const bool refuse = !comm.params().shm_single_copy;
  const std::vector<size_t> at_start(bytes.size(), 0);
  const int err = refuse ? 0 : readPeers(comm, view, kBuffer, out, at_start, off, bytes);
  const auto* in = detail::bytePtr(args.in);
  const bool failed = refuse || err != 0;
  if (!failed && bytes[r] > 0 && out + off[r] != in) std::memmove(out + off[r], in, bytes[r]);
  if (view.barrierMax(failed ? 1 : 0) != 0) fallBack(comm, args, kAllgathervShm, err);
}

}  // namespace

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

}  // namespace perseus::collectives
