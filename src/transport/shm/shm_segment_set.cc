#include "transport/shm/shm_segment_set.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <new>

#include "common/status.h"
#include "transport/shm/cpu_budget.h"
#include "transport/shm/futex.h"

namespace perseus::transport::shm {

ShmSegmentSet::ShmSegmentSet(const std::string& job_id, int local_rank,
                             std::vector<int> global_ranks, size_t ring_bytes, size_t slot_bytes)
    : local_rank_(local_rank),
      global_ranks_(std::move(global_ranks)),
      layout_(static_cast<int>(global_ranks_.size()), ring_bytes, slot_bytes),
      job_id_(job_id),
      own_name_(segmentName(job_id, global_ranks_.at(local_rank))) {
  segments_.resize(global_ranks_.size());
  watches_.resize(global_ranks_.size());
  segments_[local_rank_] = ShmSegment::create(own_name_, layout_.total_bytes);

  // The object is zero-filled, so every position, flag and epoch starts at 0; constructing the
  // atomics in place is a formality that keeps the accesses well-defined.
  char* b = segments_[local_rank_]->base();
  auto* h = new (b) SegmentHeader{};
  for (int g = 0; g < ShmArena::kMaxGroups; ++g) {
    new (b + layout_.epochs_offset + g * sizeof(BarrierEpoch)) BarrierEpoch{};
  }
  for (int s = 0; s < localSize(); ++s) {
    if (s != local_rank_) new (ring(local_rank_, s)) RingControl{};
  }
  for (size_t i = 0; i < kSharedWords; ++i)
    new (sharedWords(local_rank_) + i) std::atomic<uint64_t>(0);
  h->version = kLayoutVersion;
  h->owner_pid = static_cast<int32_t>(::getpid());
  h->global_rank = global_ranks_[local_rank_];
  h->local_rank = local_rank_;
  h->local_size = localSize();
  h->ring_bytes = ring_bytes;
  h->slot_bytes = slot_bytes;
  h->total_bytes = layout_.total_bytes;
  for (int c : allowedCpus()) {
    if (c < kMaxCpus) h->cpus[c / 64] |= uint64_t{1} << (c % 64);
  }
  h->magic.store(kSegmentMagic, std::memory_order_release);
}

ShmSegmentSet::~ShmSegmentSet() {
  if (own_linked_) ShmSegment::unlink(own_name_);
  if (!segments_[local_rank_]) return;
  // A child forked after start-up (e.g. a data-loader worker) inherits the mappings but is not
  // this rank: its exit must not tell the peers that the rank went away.
  if (header(local_rank_)->owner_pid != static_cast<int32_t>(::getpid())) return;
  header(local_rank_)->closed.store(1, std::memory_order_seq_cst);  // seq_cst: see notify()
  for (int lr = 0; lr < localSize(); ++lr) {
    if (lr != local_rank_ && segments_[lr]) notify(lr);
  }
}

void ShmSegmentSet::mapPeers() {
  const SegmentHeader* mine = header(local_rank_);
  for (int lr = 0; lr < localSize(); ++lr) {
    if (lr == local_rank_) continue;
    const int g = global_ranks_[lr];
    const std::string who = PERSEUS_STR("rank " << g << " (local rank " << lr << ")");
    std::unique_ptr<ShmSegment> seg = ShmSegment::open(segmentName(job_id_, g), who);
    const auto* h = reinterpret_cast<const SegmentHeader*>(seg->base());
    if (seg->bytes() < sizeof(SegmentHeader) ||
        h->magic.load(std::memory_order_acquire) != kSegmentMagic || h->version != kLayoutVersion) {
      throw MismatchError(PERSEUS_STR(
          "shared-memory segment "
          << seg->name() << " of " << who << " is not a Perseus v" << kLayoutVersion << " segment; "
          << "do two jobs share one job id, or different Perseus versions?"));
    }
    if (h->global_rank != g || h->local_rank != lr || h->local_size != localSize()) {
      throw MismatchError(PERSEUS_STR("shared-memory segment "
                                      << seg->name() << " says global rank " << h->global_rank
                                      << ", local rank " << h->local_rank << " of " << h->local_size
                                      << ", but this rank expects " << who << " of " << localSize()
                                      << "; the ranks of this host disagree on the topology"));
    }
    if (h->ring_bytes != mine->ring_bytes || h->slot_bytes != mine->slot_bytes ||
        h->total_bytes != seg->bytes() || seg->bytes() != layout_.total_bytes) {
      throw MismatchError(PERSEUS_STR(
          who << " uses PERSEUS_SHM_RING_BYTES=" << h->ring_bytes << " and PERSEUS_SHM_SLOT_BYTES="
              << h->slot_bytes << ", this rank uses " << mine->ring_bytes << " and "
              << mine->slot_bytes << "; every rank of a job must use the same values"));
    }
    watches_[lr] = std::make_unique<ProcessWatch>(static_cast<pid_t>(h->owner_pid));
    segments_[lr] = std::move(seg);
  }
}

std::vector<std::vector<int>> ShmSegmentSet::cpuMasks() const {
  std::vector<std::vector<int>> masks(localSize());
  for (int lr = 0; lr < localSize(); ++lr) {
    for (int c = 0; c < kMaxCpus; ++c) {
      if ((header(lr)->cpus[c / 64] >> (c % 64)) & 1u) masks[lr].push_back(c);
    }
  }
  return masks;
}

void ShmSegmentSet::unlinkOwn() {
  if (!own_linked_) return;
  ShmSegment::unlink(own_name_);
  own_linked_ = false;
}

void ShmSegmentSet::notify(int lr) const {
  // Dekker with ShmDoorbell::arm(): the caller published with a seq_cst store, we load the
  // sleeper count seq_cst. (A seq_cst store + load is cheaper than a fence: xchg instead of
  // mov + mfence on x86; seq_cst loads are plain loads there.)
  SegmentHeader* h = header(lr);
  if (h->sleepers.load(std::memory_order_seq_cst) != 0) {
    h->doorbell.fetch_add(1, std::memory_order_release);
    futexWakeAll(&h->doorbell);
  }
}

void ShmSegmentSet::alert(int lr) const {
  // Dekker with ShmDoorbell::arm() as in notify(), the count being what is published.
  SegmentHeader* h = header(lr);
  h->doorbell.fetch_add(1, std::memory_order_seq_cst);
  if (h->sleepers.load(std::memory_order_seq_cst) != 0) futexWakeAll(&h->doorbell);
}

bool ShmSegmentSet::peerGone(int lr, std::string* why) const {
  if (header(lr)->closed.load(std::memory_order_acquire) != 0) {
    *why = "closed its shared-memory transport (it shut down or failed)";
    return true;
  }
  if (watches_[lr] && watches_[lr]->gone()) {
    *why = PERSEUS_STR("exited (pid " << watches_[lr]->pid() << ": killed or crashed)");
    return true;
  }
  return false;
}

void ShmSegmentSet::recordCause(int lost_rank, const std::string& reason) const {
  SegmentHeader* h = header(local_rank_);
  if (lost_rank < 0 || h->cause_rank.load(std::memory_order_relaxed) != 0) return;
  const size_t n = std::min(reason.size(), kCauseBytes - 1);
  std::memcpy(h->cause, reason.data(), n);
  h->cause[n] = '\0';
  h->cause_rank.store(lost_rank + 1, std::memory_order_release);
}

void ShmSegmentSet::throwPeerLost(int lr, const std::string& why,
                                  const std::string& waiting_for) const {
  const int g = global_ranks_[lr];
  const SegmentHeader* h = header(lr);
  const int cause = h->cause_rank.load(std::memory_order_acquire) - 1;
  if (cause >= 0) {
    // A cascade: lr stopped because it lost `cause`; that is the rank to look at.
    const std::string reason(h->cause, strnlen(h->cause, kCauseBytes));
    throw PeerLostError(
        cause,
        PERSEUS_STR("rank " << cause << " was lost first (as rank " << g << " reported: " << reason
                            << "); rank " << g << " (local rank " << lr
                            << " on this host) stopped because of it and " << why << " while rank "
                            << global_ranks_[local_rank_] << " was " << waiting_for << "; see rank "
                            << cause << "'s log or exit status for the cause"));
  }
  throw PeerLostError(
      g,
      PERSEUS_STR("rank " << g << " (local rank " << lr << " on this host) " << why
                          << " while rank " << global_ranks_[local_rank_] << " was " << waiting_for
                          << "; see that rank's log or exit status for the cause"));
}

}  // namespace perseus::transport::shm
