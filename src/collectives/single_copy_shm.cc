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
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <vector>

#include "collectives/arena_view.h"
#include "collectives/collectives.h"
#include "collectives/cost_model.h"
#include "collectives/detail.h"
#include "collectives/registry.h"
#include "common/logging.h"
#include "common/worker_pool.h"
#include "transport/shm/cross_memory.h"

namespace perseus::collectives {

extern const Algorithm kBroadcastShm;
extern const Algorithm kAllgathervShm;

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
        << "); large broadcasts and allgathers go through the shared-memory slots instead "
           "(two copies instead of one)";
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

// Copies `bytes` from offset `at` of member `q`'s published buffer to `to`; 0 or the errno.
int readRange(const detail::ArenaView& view, int q, size_t at, void* to, size_t bytes) {
  Published p;
  std::memcpy(&p, view.half(q, 0), sizeof p);
  return transport::shm::readPeerMemory(static_cast<pid_t>(p.pid),
                                        reinterpret_cast<const void*>(p.address + at), to, bytes);
}

// Note [Split single-copy reads]: one core copies ~10 GB/s, well below what memory gives a
// host's cores together, so a rank with cores to spare (its share of the host's CPUs, as the
// reduce threads count them) splits each read into runs that threads of its worker pool copy
// at once: an allgather's piece from every peer, a broadcast's whole message from the root.
// The cost model divides the per-byte time by the same count, so on a many-core host a large
// broadcast reads in one split copy instead of pipelining two copies through the slots.
// Below this a run's system call and page pinning would cost more than a second thread saves.
constexpr size_t kMinReadRun = 256 * 1024;

// Threads this rank splits its reads of `bytes` among (Note [Split single-copy reads]).
int readThreads(const Communicator& comm, size_t bytes) {
  const int own = detail::ownReduceThreads(comm);
  return static_cast<int>(std::max<size_t>(1, std::min<size_t>(own, bytes / kMinReadRun)));
}

// Reads `bytes[q]` from offset `from[q]` of each peer q's published buffer to `out + to[q]`,
// split among threads; 0 or the errno of a failed read.
int readPeers(Communicator& comm, const detail::ArenaView& view, unsigned char* out,
              const std::vector<size_t>& from, const std::vector<size_t>& to,
              const std::vector<size_t>& bytes) {
  const int p = comm.size(), r = comm.rank();
  size_t largest = 0;
  for (int q = 0; q < p; ++q) largest = q == r ? largest : std::max(largest, bytes[q]);
  const int threads = readThreads(comm, largest);
  std::atomic<int> first_err{0};
  auto part = [&](int t) {
    for (int k = 1; k < p && first_err.load(std::memory_order_relaxed) == 0; ++k) {
      const int q = (r + k) % p;  // members start at different peers
      const size_t run = (bytes[q] + static_cast<size_t>(threads) - 1) / threads;
      const size_t begin = std::min(bytes[q], run * static_cast<size_t>(t));
      const size_t len = std::min(bytes[q] - begin, run);
      if (len == 0) continue;
      const int err = readRange(view, q, from[q] + begin, out + to[q] + begin, len);
      if (err != 0) {
        int none = 0;
        first_err.compare_exchange_strong(none, err);
      }
    }
  };
  WorkerPool::instance().run(threads, part, comm.params().spin_us);
  return first_err.load();
}

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
  return readPeers(comm, view, out, from, from, bytes);
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
  const int err = refuse ? 0 : readPeers(comm, view, out, at_start, off, bytes);
  const auto* in = detail::bytePtr(args.in);
  const bool failed = refuse || err != 0;
  if (!failed && bytes[r] > 0 && out + off[r] != in) std::memmove(out + off[r], in, bytes[r]);
  if (view.barrierMax(failed ? 1 : 0) != 0) fallBack(comm, args, kAllgathervShm, err);
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

}  // namespace perseus::collectives
