#include "collectives/single_copy.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>

#include "collectives/collectives.h"
#include "collectives/detail.h"
#include "common/logging.h"
#include "common/worker_pool.h"
#include "transport/shm/cross_memory.h"

namespace perseus::collectives {
namespace {

std::atomic<uint64_t> g_fallbacks{0};
std::atomic<bool> g_warned{false};

struct Published {
  uint64_t pid;
  uint64_t address[2];
};

// Note [Split single-copy reads]: one core copies ~10 GB/s, well below what memory gives a
// host's cores together, so a rank with cores to spare (its share of the host's CPUs, as the
// reduce threads count them) splits each read into runs that threads of its worker pool copy
// at once: an allgather's piece from every peer, a broadcast's whole message from the root.
// The cost model divides the per-byte time by the same count, so on a many-core host a large
// broadcast reads in one split copy instead of pipelining two copies through the slots.
// Below this a run's system call and page pinning would cost more than a second thread saves.
constexpr size_t kMinReadRun = 256 * 1024;

}  // namespace

uint64_t singleCopyFallbacks() { return g_fallbacks.load(std::memory_order_relaxed); }

namespace single_copy {

void publish(const detail::ArenaView& view, int rank, const void* first, const void* second) {
  const Published p{static_cast<uint64_t>(::getpid()),
                    {reinterpret_cast<uintptr_t>(first), reinterpret_cast<uintptr_t>(second)}};
  std::memcpy(view.half(rank, 0), &p, sizeof p);
}

bool publishedInPlace(const detail::ArenaView& view, int q) {
  Published p;
  std::memcpy(&p, view.half(q, 0), sizeof p);
  return p.address[0] == p.address[1];
}

int readRange(const detail::ArenaView& view, int q, int which, size_t at, void* to, size_t bytes) {
  Published p;
  std::memcpy(&p, view.half(q, 0), sizeof p);
  return transport::shm::readPeerMemory(
      static_cast<pid_t>(p.pid), reinterpret_cast<const void*>(p.address[which] + at), to, bytes);
}

int readThreads(const Communicator& comm, size_t bytes) {
  const int own = detail::ownReduceThreads(comm);
  return static_cast<int>(std::max<size_t>(1, std::min<size_t>(own, bytes / kMinReadRun)));
}

int readPeers(Communicator& comm, const detail::ArenaView& view, int which, unsigned char* out,
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
      const int err = readRange(view, q, which, from[q] + begin, out + to[q] + begin, len);
      if (err != 0) {
        int none = 0;
        first_err.compare_exchange_strong(none, err);
      }
    }
  };
  WorkerPool::instance().run(threads, part, comm.params().spin_us);
  return first_err.load();
}

bool agreed(Communicator& comm, const detail::ArenaView& view, int which, int* err) {
  if (comm.singleCopyAgreed()) return true;
  const int p = comm.size(), r = comm.rank();
  const bool refuse = !comm.params().shm_single_copy;
  unsigned char probe = 0;
  for (int k = 1; k < p && !refuse && *err == 0; ++k)
    *err = readRange(view, (r + k) % p, which, 0, &probe, 1);
  if (view.barrierMax(refuse || *err != 0 ? 1 : 0) != 0) return false;
  comm.setSingleCopyAgreed();
  return true;
}

void failedAfterAgreement(const Communicator& comm, int err, const char* what, const char* moved) {
  throw InternalError(PERSEUS_STR(
      "single-copy " << what << " on rank " << comm.globalRank(comm.rank()) << ": "
                     << (err != 0 ? PERSEUS_STR("reading a local peer's memory failed ("
                                                << std::strerror(err) << ")")
                                  : std::string("another member could not read a peer's memory"))
                     << "; set PERSEUS_SHM_SINGLE_COPY=0 to move " << moved
                     << " through the slots"));
}

void fallBack(Communicator& comm, const CollectiveArgs& args, const Algorithm& slots, int err) {
  g_fallbacks.fetch_add(1, std::memory_order_relaxed);
  comm.setSingleCopyFailed();
  if (err != 0 && !g_warned.exchange(true, std::memory_order_relaxed)) {
    PERSEUS_LOG(WARNING, kCollectives)
        << "rank " << comm.globalRank(comm.rank()) << ": cannot read a local peer's memory ("
        << std::strerror(err) << ", in a " << collectiveName(args.kind)
        << "); large broadcasts, allgathers, allreduces and reduce-scatters go through the "
           "shared-memory slots "
           "instead (more copies)";
  }
  slots.run(comm, args);
}

}  // namespace single_copy
}  // namespace perseus::collectives
