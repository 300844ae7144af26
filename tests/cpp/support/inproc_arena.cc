#include "support/inproc_arena.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "common/status.h"
#include "transport/shm/cpu_budget.h"

namespace perseus::testing {

class InProcArenaView : public transport::ShmArena {
 public:
  InProcArenaView(InProcArenaHost* host, int local_rank)
      : host_(host), local_rank_(local_rank), epochs_(kMaxGroups, 0) {}

  int localRank() const override { return local_rank_; }
  int localSize() const override { return static_cast<int>(host_->global_ranks_.size()); }
  const std::vector<int>& globalRanks() const override { return host_->global_ranks_; }
  size_t slotBytes() const override { return host_->slot_bytes_; }
  // The ranks are threads of this process: they share its CPUs.
  int hostCpus() const override { return transport::shm::usableCpus(); }
  void* slot(int local_rank) override {
    if (local_rank < 0 || local_rank >= localSize()) {
      throw InvalidArgumentError("InProcArena::slot: bad local rank");
    }
    return host_->slots_[local_rank];
  }

  void barrier(int group_id, const std::vector<int>& members) override {
    arrive(group_id, members, nullptr);
  }

  uint64_t barrierMax(int group_id, const std::vector<int>& members, uint64_t value) override {
    const uint64_t target = arrive(group_id, members, &value);
    uint64_t largest = value;
    for (int m : members) {
      largest =
          std::max(largest, line(m, group_id).carried[target % 2].load(std::memory_order_relaxed));
    }
    return largest;
  }

  uint64_t barriers(int group_id) const override {
    return epochs_.at(static_cast<size_t>(group_id));
  }
  void continueBarriersFrom(int group_id, uint64_t count) override {
    uint64_t& mine = epochs_.at(static_cast<size_t>(group_id));
    if (count < mine)
      throw InvalidArgumentError("continueBarriersFrom: count below the barriers passed");
    mine = count;
  }

  void abort(const std::string&) override { host_->abortAll("aborted"); }

 private:
  uint64_t arrive(int group_id, const std::vector<int>& members, const uint64_t* carried) {
    if (group_id < 0 || group_id >= kMaxGroups) throw InvalidArgumentError("bad group id");
    const uint64_t target = ++epochs_[group_id];
    if (carried)
      line(local_rank_, group_id).carried[target % 2].store(*carried, std::memory_order_relaxed);
    epoch(local_rank_, group_id).store(target, std::memory_order_release);
    auto start = std::chrono::steady_clock::now();
    for (int m : members) {
      for (uint32_t i = 0; epoch(m, group_id).load(std::memory_order_acquire) < target; ++i) {
        if (host_->aborted_.load()) throw ShutDownError("in-process arena aborted");
        if (i < 1000) continue;
        sched_yield();  // ranks as threads usually outnumber the cores
        if ((i & 1023) == 0) {
          std::chrono::duration<double> waited = std::chrono::steady_clock::now() - start;
          if (waited.count() > host_->timeout_s_) {
            throw TimeoutError(PERSEUS_STR(
                "local rank " << local_rank_ << " waited " << waited.count()
                              << " s in barrier of group " << group_id << " for local rank " << m));
          }
        }
      }
    }
    return target;
  }
  InProcArenaHost::Epoch& line(int local_rank, int group) {
    return host_->epochs_[static_cast<size_t>(local_rank) * kMaxGroups + group];
  }
  std::atomic<uint64_t>& epoch(int local_rank, int group) { return line(local_rank, group).value; }
  InProcArenaHost* host_;
  int local_rank_;
  std::vector<uint64_t> epochs_;
};

InProcArenaHost::InProcArenaHost(std::vector<int> global_ranks, size_t slot_bytes,
                                 const Params& params)
    : global_ranks_(std::move(global_ranks)),
      slot_bytes_(slot_bytes),
      timeout_s_(params.timeout_s),
      epochs_(new Epoch[global_ranks_.size() * transport::ShmArena::kMaxGroups]) {
  for (size_t i = 0; i < global_ranks_.size(); ++i) {
    auto* slot =
        static_cast<unsigned char*>(std::aligned_alloc(64, (slot_bytes + 63) & ~size_t{63}));
    // Poison, so a read of a byte no rank wrote shows up as a wrong result.
    std::memset(slot, 0xA5, slot_bytes);
    slots_.push_back(slot);
    views_.push_back(std::make_unique<InProcArenaView>(this, static_cast<int>(i)));
  }
}

InProcArenaHost::~InProcArenaHost() {
  for (auto* s : slots_) std::free(s);
}

void InProcArenaHost::abortAll(const std::string&) { aborted_.store(true); }

}  // namespace perseus::testing
