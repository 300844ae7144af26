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
// So with PERSEUS_SHM_STORES=auto the choice is made online, per collective and size class
// (factors of 4 from 16 KiB): every call reports its time per byte, counted from its first
// barrier so that a late peer does not count; the mode with the lower recent figure is used,
// and the other is retried every `period` calls (8, doubling to 256 while it keeps losing); a
// mode must be 10% faster to take over. A change of placement is noticed within a few hundred
// calls at most, while a losing mode costs at most 1/8 of the calls and usually 1/256. The
// choice is per process: it needs no agreement between ranks, because a reader never depends
// on how a line was written (each writer fences its streaming stores before the barrier that
// publishes them).
#pragma once

#include <chrono>
#include <cstddef>
#include <mutex>
#include <string>

#include "collectives/registry.h"

namespace perseus::collectives {

enum class SlotStores { kCached = 0, kStreaming = 1 };

class SlotStoreChooser {
 public:
  // The process-wide chooser: every shared-memory group of a process shares the same cores.
  static SlotStoreChooser& instance();

  // The mode for a call of collective `kind` moving `bytes`, under `setting` ("auto",
  // "cached" or "streaming", Params::shm_stores). Below kChosenBytes, auto is always cached:
  // a few lines cost the same either way and their timings are noise. Thread-safe.
  SlotStores pick(const std::string& setting, Collective kind, size_t bytes);
  // Whether pick() measures (auto, at least kChosenBytes) rather than follows a fixed rule;
  // only such calls need timing and record().
  static bool measures(const std::string& setting, size_t bytes) {
    return setting == "auto" && bytes >= kChosenBytes;
  }
  // The wall time of a call made in `mode`. Thread-safe.
  void record(SlotStores mode, Collective kind, size_t bytes, double seconds);

  static constexpr size_t kChosenBytes = 16 * 1024;

 private:
  static constexpr int kKinds = 7;     // Collective's values
  static constexpr int kClasses = 8;   // sizes by factors of 4: < 16 KiB, ..., >= 64 MiB
  static constexpr unsigned kFirstPeriod = 8, kLastPeriod = 256;
  struct SizeClass {
    double ns_per_byte[2] = {0.0, 0.0};  // 0: not measured yet
    int best = 0;
    unsigned since_trial = 0;
    unsigned period = kFirstPeriod;
  };
  SizeClass& classOf(Collective kind, size_t bytes);

  std::mutex mu_;
  SizeClass classes_[kKinds][kClasses];
};

// One collective call's slot writes: picks the mode when constructed, writes in it, and
// reports the call's time to the chooser when the call finishes (not when it throws: a lost
// peer says nothing about the stores). Calls the chooser does not measure read no clock.
class SlotWriter {
 public:
  SlotWriter(const std::string& setting, Collective kind, size_t bytes);
  // A rank that writes nothing into its slot (a broadcast's receivers): cached, untimed.
  static SlotWriter readerOnly(Collective kind) { return SlotWriter("cached", kind, 0); }
  bool streaming() const { return mode_ == SlotStores::kStreaming; }
  // Copies bytes that another core will read into a slot. Buffers must not overlap.
  void copy(void* slot, const void* src, size_t len) const;
  // Call before the barrier that tells the peers the slot is written: streaming stores are
  // weakly ordered and must be fenced first. Every thread that copied must call it.
  void publish() const;
  // Call after the call's first barrier: the time a rank waits there for late peers says
  // nothing about the stores, and on a busy host it can dwarf the transfer.
  void startClock();
  void finished();

 private:
  SlotStores mode_;
  bool timed_;
  Collective kind_;
  size_t bytes_;
  std::chrono::steady_clock::time_point start_{};
};

}  // namespace perseus::collectives
