// What the submitting threads check a request against: the process sets as the Cycle publishes
// them (Cycle::Listener), and the counters that name the calls without a user name (every rank
// counts its calls, and ranks make them in the same order, so the n-th call has the same name
// everywhere). It also keeps the last stall warning, for diagnostics.
//
// Contract: any thread. One mutex guards it all, held for a lookup or a counter only; no other
// lock is taken under it.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "engine/cycle/process_set.h"
#include "engine/entry.h"

namespace perseus::engine {

class SetDirectory {
 public:
  explicit SetDirectory(int global_rank) : rank_(global_rank) {}

  // From the Cycle, as it adds and removes sets.
  void added(const ProcessSetInfo& info);
  void removed(int32_t id);
  std::optional<ProcessSetInfo> find(int32_t id) const;

  // Throws InvalidArgumentError, naming the op and the tensor, when `e` cannot run in its set:
  // no name, an unknown set or one this rank is not a member of, a negative dimension, a null
  // input, a scalar where rows are split or concatenated, a root outside the set, alltoall
  // splits that do not add up.
  void validate(const Entry& e) const;

  // The number of this call of its kind: the n-th barrier of `set`, add_process_set,
  // remove_process_set.
  int nextBarrier(int32_t set);
  int nextAddSet();
  int nextRemoveSet();

  void setStallWarning(const std::string& text);
  std::string lastStallWarning() const;

 private:
  const int rank_;
  mutable std::mutex mu_;
  std::map<int32_t, ProcessSetInfo> sets_;
  std::map<int32_t, int> barrier_calls_;
  int add_set_calls_ = 0;
  int remove_set_calls_ = 0;
  std::string last_stall_warning_;
};

}  // namespace perseus::engine
