// Note [Slot stores]
// How a rank writes the bytes that another core will read out of the shared-memory arena.
// Cached stores leave the lines dirty in the writer's cache, so the reader pulls them core to
// core; non-temporal (streaming) stores send them to memory, so the reader fetches them from
// DRAM. Which is faster depends on where the host placed the two cores, and on a virtual
// machine that placement can change while a job runs: either mode can be the faster by a
// factor of several (`bench/floor_probe_bench`, crosscore vs crosscore-nt, shows which one is on
// a given host).
//
// So with PERSEUS_SHM_STORES=auto the choice is made online, per communicator, collective and
// size class (factors of 4 from 16 KiB): every call reports its time per byte, counted from
// its first barrier so that a late peer does not count; the mode with the lower recent figure
// is used, and the other is retried every `period` calls (8, doubling to 256 while it keeps
// losing); a mode must be 10% faster to take over. A change of placement is noticed within a
// few hundred calls at most, while a losing mode costs at most 1/8 of the calls and usually
// 1/256. The mode in use is judged by the median of its last three calls, so that one
// descheduled rank does not flip the choice while a real change shows within two calls.
//
// Members agree on the mode of every call. A reader never depends on how a line was written
// (each writer fences its streaming stores before the barrier that publishes them), so a
// disagreement would be correct, but it measures badly: a call's time depends on every
// member's stores, so one rank's trial of the other mode, while its peers keep theirs, shows
// only part of that mode's gain, and the ranks could stay in the worse mode for good (about
// 3x slower than the better mode; `bench/collectives_bench --ops allreduce` with
// PERSEUS_SHM_STORES=auto against cached shows it when ranks choose alone). So the
// call's last barrier carries each member's time (ShmArena::barrierMax) and every member
// records the slowest one: the same samples in the same order give every member the same
// state, the same trials and the same choices.
#pragma once

#include <chrono>
#include <cstddef>
#include <mutex>
#include <string>

#include "collectives/arena_view.h"
#include "collectives/communicator.h"
#include "collectives/registry.h"

namespace perseus::collectives {

enum class SlotStores { kCached = 0, kStreaming = 1 };

// One per communicator (Communicator::storeChooser()): its members make the same calls in the
// same order, which keeps their choosers in step.
class SlotStoreChooser {
 public:
  // The mode for a call of collective `kind` moving `bytes`, under `setting` ("auto",
  // "cached" or "streaming", Params::shm_stores). Below kChosenBytes, auto is always cached:
  // a few lines cost the same either way and their timings are noise. Thread-safe.
  SlotStores pick(const std::string& setting, Collective kind, size_t bytes);
  // Whether pick() measures (auto, at least kChosenBytes) rather than follows a fixed rule;
  // only such calls need timing and record().
  static bool measures(const std::string& setting, size_t bytes) {
    return setting == "auto" && bytes >= kChosenBytes;
  }
  // The wall time of a call made in `mode` (the slowest member's). Thread-safe.
  void record(SlotStores mode, Collective kind, size_t bytes, double seconds);

  static constexpr size_t kChosenBytes = 16 * 1024;

  // A size class's running figures (ns per byte of each mode, 0 while unmeasured) and the mode
  // in use: for tests and diagnostics. Thread-safe.
  struct Figures {
    double ns_per_byte[2];
    SlotStores best;
  };
  Figures figures(Collective kind, size_t bytes);

 private:
  static constexpr int kKinds = 7;    // Collective's values
  static constexpr int kClasses = 8;  // sizes by factors of 4: < 16 KiB, ..., >= 64 MiB
  static constexpr unsigned kFirstPeriod = 8, kLastPeriod = 256;
  struct SizeClass {
    double ns_per_byte[2] = {0.0, 0.0};  // the median of `recent`; 0: not measured yet
    double recent[2][3] = {};            // each mode's last samples
    int next[2] = {0, 0};                // where each mode's next sample goes
    int best = 0;
    unsigned since_trial = 0;
    unsigned period = kFirstPeriod;
  };
  SizeClass& classOf(Collective kind, size_t bytes);

  std::mutex mu_;
  SizeClass classes_[kKinds][kClasses];
};

// One collective call's slot writes: picks the mode when constructed, writes in it, and
// reports the call's time to the chooser at its last barrier (not when it throws: a lost peer
// says nothing about the stores). Calls the chooser does not measure read no clock.
class SlotWriter {
 public:
  SlotWriter(Communicator& comm, Collective kind, size_t bytes);
  // A rank that writes nothing into its slot (a broadcast's receivers): cached, untimed, but it
  // passes the writer's times through the last barrier like every member.
  static SlotWriter readerOnly(Communicator& comm, Collective kind, size_t bytes);
  bool streaming() const { return mode_ == SlotStores::kStreaming; }
  // Copies bytes that another core will read into a slot. Buffers must not overlap.
  void copy(void* slot, const void* src, size_t len) const;
  // Call before the barrier that tells the peers the slot is written: streaming stores are
  // weakly ordered and must be fenced first. Every thread that copied must call it.
  void publish() const;
  // Call after the call's first barrier: the time a rank waits there for late peers says
  // nothing about the stores, and on a busy host it can dwarf the transfer.
  void startClock();
  // The call's barriers: `last` marks its final one, where the members' times meet.
  void barrier(const detail::ArenaView& view, bool last);

 private:
  SlotWriter(Communicator& comm, Collective kind, size_t bytes, bool writes);

  SlotStoreChooser& chooser_;
  SlotStores mode_;
  bool exchange_;  // the chooser measures this call: the last barrier carries the times
  bool timed_;     // ... and this rank's own time counts
  Collective kind_;
  size_t bytes_;
  std::chrono::steady_clock::time_point start_{};
};

}  // namespace perseus::collectives
