// How many threads share one rank's work in the shared-memory allreduce (Note [Reduce
// threads], collectives/allreduce_shm.cc), and so how large the shared-memory slot must be
// (transport/shm/shm_local_group.cc). Pure functions, so tests can check the policy without a
// many-core machine.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace perseus::reduce_threads {

// Note [Pipeline lag]: the pipelined shm allreduce stages segment k + kPipelineLag while it
// reduces segment k, and pulls segment k - kPipelineLag's results, so a peer reads a line
// kPipelineLag steps (~1.5 MiB of this core's traffic) after it was written. By then the line
// has left the writer's 1 MiB L2 for the shared L3, where the other core reads it several times
// faster than out of a peer's L2 (`bench/floor_probe_bench`: 7.3 GB/s for 256 KiB blocks, 28 GB/s
// for 4 MiB ones, with the two cores placed where they share lines fast). Measured on 2 ranks
// (`bench/collectives_bench --ops allreduce`): 1 MiB 11.5 -> 15.3-15.5 GB/s, 4 MiB 11.8 ->
// 12.8-13.6, 16 MiB 7.1 -> 7.7-7.8. The slot holds
// 2 * kPipelineLag + 1 buffers: one being reduced, kPipelineLag staged ahead, kPipelineLag
// waiting for their pulls.
constexpr int kPipelineLag = 2;
constexpr int kPipelineBuffers = 2 * kPipelineLag + 1;

// Auto never goes beyond this: eight cores already move more than one socket's share of
// memory bandwidth for two ranks.
constexpr int kAutoMaxReduceThreads = 8;
// Each thread's share of a segment targets this (the single-thread segment size: it stays in
// that core's L2)...
constexpr size_t kThreadShareBytes = 256 * 1024;
// ...and is never below this, where the fork-join (~1-2 µs per segment) would cost more than
// ~5% of the share's work (it moves ~4 bytes per share byte at ~10 GB/s per core).
constexpr size_t kMinThreadShareBytes = 64 * 1024;

// The threads requested: `setting` is Params::reduce_threads (n > 0 forces n; 0 = auto: the
// CPUs of this process split among the ranks of its host, 1..kAutoMaxReduceThreads).
inline int requestedReduceThreads(int64_t setting, int usable_cpus, int local_ranks) {
  if (setting > 0) return static_cast<int>(setting);
  return std::max(1, std::min(kAutoMaxReduceThreads, usable_cpus / std::max(1, local_ranks)));
}

// The threads one pipelined allreduce of `bytes` uses, given each slot buffer holds `buffer`
// bytes (1 / kPipelineBuffers of the slot's data area): fewer than requested when the message or
// the buffer cannot give each thread kMinThreadShareBytes.
inline int effectiveReduceThreads(int requested, size_t bytes, size_t buffer) {
  const size_t fit = std::min(bytes, buffer) / kMinThreadShareBytes;
  return static_cast<int>(
      std::max<size_t>(1, std::min<size_t>(static_cast<size_t>(requested), fit)));
}

// Segment bytes for `threads` threads: each thread's share ~kThreadShareBytes, within the
// buffer, a multiple of 64.
inline size_t segmentBytes(int threads, size_t buffer) {
  return std::min(buffer, kThreadShareBytes * static_cast<size_t>(threads)) & ~size_t{63};
}

}  // namespace perseus::reduce_threads
