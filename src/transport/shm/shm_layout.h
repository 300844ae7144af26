// Byte layout of one local rank's shared-memory segment (see Note [Shared-memory segments] in
// shm_local_group.h). Every field that another process touches is a lock-free atomic; the
// creator constructs them in zero-filled memory before it publishes `magic`.
//
//   [SegmentHeader][kMaxGroups x BarrierEpoch][(local_size-1) x (RingControl + ring bytes)][slot]
//   [shared area: kSharedWords atomic words][kSharedBytes bytes]
//
// Rings live in the segment of the rank that RECEIVES on them: the owner is the only consumer
// of its rings, and sender s writes ring index (s < owner ? s : s - 1).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "transport/shm/shm_arena.h"

namespace perseus::transport::shm {

constexpr size_t kCacheLine = 64;
constexpr size_t kPage = 4096;
constexpr size_t kCauseBytes = 384;
constexpr uint64_t kSegmentMagic = 0x3153554553524550ull;  // "PERSEUS1", little-endian
constexpr uint32_t kLayoutVersion = 6;
// CPUs a segment header can name (glibc's CPU_SETSIZE).
constexpr int kMaxCpus = 1024;
// ShmArena::sharedArea(), sized for the post board (collectives/post_board.h): three cache
// lines of per-rank words, 4096 slot states and as many read counts (collectives/post_lending.h),
// and two payload pools of 1 MiB.
constexpr size_t kSharedWords = 3 * (kCacheLine / sizeof(uint64_t)) + 2 * 4096;
constexpr size_t kSharedBytes = 2u << 20;

static_assert(std::atomic<uint64_t>::is_always_lock_free,
              "shared 64-bit atomics must be lock-free");

struct SegmentHeader {
  std::atomic<uint64_t> magic;  // stored last (release) by the creator
  uint32_t version;
  int32_t owner_pid;
  int32_t global_rank;
  int32_t local_rank;
  int32_t local_size;
  int32_t reserved;
  uint64_t ring_bytes;
  uint64_t slot_bytes;
  uint64_t total_bytes;
  // The CPUs the owner may run on as it created the segment, bit c % 64 of word c / 64 for CPU
  // c (none when it could not read its mask): every local rank's HostCpus (cpu_budget.h).
  uint64_t cpus[kMaxCpus / 64];
  // Set (release) by the owner when it shuts its transport down, after its last write.
  alignas(kCacheLine) std::atomic<uint32_t> closed;
  // Eventcount the owner sleeps on: `sleepers` > 0 while it may be in FUTEX_WAIT on `doorbell`;
  // anyone who makes progress possible for it bumps `doorbell` and wakes it (see ShmDoorbell).
  alignas(kCacheLine) std::atomic<uint32_t> doorbell;
  std::atomic<uint32_t> sleepers;
  // Why the owner stopped, when a lost peer stopped it: `cause_rank` is that peer's global
  // rank + 1 (0: none), stored (release) after `cause`, before `closed`. Peers that see the
  // owner go report the rank that was lost first instead of the owner (a cascade).
  alignas(kCacheLine) std::atomic<int32_t> cause_rank;
  char cause[kCauseBytes];
};

// One arena-barrier counter per group, written only by the owner (see ShmArenaImpl::barrier),
// and the values the owner carried into barrierMax() calls: barrier e uses carried[e % 2].
struct alignas(kCacheLine) BarrierEpoch {
  std::atomic<uint64_t> value;
  std::atomic<uint64_t> carried[2];
};

// Positions are byte counts since creation (never wrap in practice: 2^64 bytes).
struct RingControl {
  alignas(2 * kCacheLine) std::atomic<uint64_t> head;  // consumer-owned: bytes taken
  alignas(2 * kCacheLine) std::atomic<uint64_t> tail;  // producer-owned: bytes written
};

constexpr size_t alignUp(size_t n, size_t a) { return (n + a - 1) / a * a; }

struct SegmentLayout {
  SegmentLayout(int local_size, size_t ring_bytes, size_t slot_bytes)
      : ring_bytes(ring_bytes), slot_bytes(slot_bytes) {
    epochs_offset = alignUp(sizeof(SegmentHeader), kCacheLine);
    rings_offset = alignUp(epochs_offset + ShmArena::kMaxGroups * sizeof(BarrierEpoch), kPage);
    ring_stride = alignUp(sizeof(RingControl), kPage) + alignUp(ring_bytes, kPage);
    slot_offset = rings_offset + static_cast<size_t>(local_size - 1) * ring_stride;
    shared_words_offset = slot_offset + alignUp(slot_bytes, kPage);
    shared_bytes_offset =
        shared_words_offset + alignUp(kSharedWords * sizeof(std::atomic<uint64_t>), kPage);
    total_bytes = shared_bytes_offset + kSharedBytes;
  }
  // Offset of the ring that `sender` writes in `owner`'s segment.
  size_t ringOffset(int owner, int sender) const {
    return rings_offset + static_cast<size_t>(sender < owner ? sender : sender - 1) * ring_stride;
  }
  size_t ringDataOffset(int owner, int sender) const {
    return ringOffset(owner, sender) + alignUp(sizeof(RingControl), kPage);
  }

  size_t ring_bytes, slot_bytes;
  size_t epochs_offset, rings_offset, ring_stride, slot_offset, shared_words_offset,
      shared_bytes_offset, total_bytes;
};

}  // namespace perseus::transport::shm
