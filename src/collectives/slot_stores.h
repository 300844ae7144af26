// Note [Slot stores]
// How a rank writes the bytes that another core will read out of the shared-memory arena.
// Cached stores leave the lines dirty in the writer's cache, so the reader pulls them core to
// core; non-temporal (streaming) stores send them to memory, so the reader fetches them from
// DRAM. Which is faster depends on where the host placed the two cores, and on a VM that
// changes while a job runs. Measured on the 2-vCPU VM (bench/floor_probe_bench.cc, crosscore
// vs crosscore-nt, docs/algorithms.md): 64 KiB-1 MiB blocks move core to core at 7-11 GB/s in
// one placement and at 2 GB/s in the other, and through memory at 7.5-8.7 and 8-14 GB/s. A
// 2-rank 1 MiB allreduce ran at 11 GB/s (cached) vs 4.7 (streaming) in the first placement
// and at 1.7 vs 7.5 in the second.
//
// So with PERSEUS_SHM_STORES=auto the choice is made online, per size class: every call
// reports its time; the mode with the lower recent time per byte is used, and the other one
// is re-tried every `period` calls (8, doubling to 256 while it keeps losing), so a change of
// placement is noticed within a few hundred calls at most, while a losing mode costs at most
// 1/8 of the calls and usually 1/256. The choice is per process: it needs no agreement
// between ranks, because a reader never depends on how a line was written (each writer
// fences its streaming stores before the barrier that publishes them).
#pragma once

#include <cstddef>
#include <mutex>
#include <string>

namespace perseus::collectives {

enum class SlotStores { kCached = 0, kStreaming = 1 };

class SlotStoreChooser {
 public:
  // The process-wide chooser: every shared-memory group of a process shares the same cores.
  static SlotStoreChooser& instance();

  // The mode for a call moving `bytes`, under `setting` ("auto", "cached" or "streaming",
  // Params::shm_stores). Thread-safe.
  SlotStores pick(const std::string& setting, size_t bytes);
  // The wall time of a call made in `mode`. Thread-safe.
  void record(SlotStores mode, size_t bytes, double seconds);

 private:
  static constexpr int kClasses = 6;  // 64 KiB, 256 KiB, ... , >= 64 MiB
  static constexpr unsigned kFirstPeriod = 8, kLastPeriod = 256;
  struct SizeClass {
    double ns_per_byte[2] = {0.0, 0.0};  // 0: not measured yet
    int best = 0;
    unsigned since_trial = 0;
    unsigned period = kFirstPeriod;
  };
  static int classOf(size_t bytes);

  std::mutex mu_;
  SizeClass classes_[kClasses];
};

}  // namespace perseus::collectives
