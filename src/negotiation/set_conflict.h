// Global rank 0's check that no tensor name is in flight on two process sets that wait for
// each other. Every rank reports its new (uncached) requests of every set through the global
// negotiation; a name that rank A submitted on set S while rank B submitted it on set T, with
// A a member of T and B a member of S, can complete in neither set (each waits for a rank
// that submitted elsewhere), so it fails on every rank with MismatchError.
//
// Contract: pure bookkeeping (no network, no clock), engine thread of global rank 0 only.
// Cached requests are not reported (steady-state steps cost nothing): a name cached on one
// set and submitted on another is caught once the cached request stalled (after
// PERSEUS_STALL_WARNING its cache bit is invalidated and it is reported like a new one).
// Limitation: one rank submitting one name on two overlapping sets at once may be reported
// as a conflict when the other ranks submit the two in the opposite order.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "negotiation/request.h"

namespace perseus::engine {

class SetConflictCheck {
 public:
  // Global ranks of a set's members, or null for an unknown set.
  using MembersOf = std::function<const std::vector<int>*(int32_t set_id)>;
  explicit SetConflictCheck(MembersOf members_of) : members_of_(std::move(members_of)) {}

  // Global rank `rank` submitted `request` (on request.process_set) and has not had it
  // answered yet.
  void add(int rank, const Request& request);
  // Error responses (cross_set = true, MismatchError code) for the names found in conflict
  // since the last call; those names are forgotten.
  std::vector<Response> takeConflicts();
  size_t numPending() const { return table_.size(); }

 private:
  struct Pending {
    OpType op = OpType::kAllreduce;
    std::set<int> ranks;  // global ranks that submitted the name on this set
  };
  std::string describe(int32_t set_id, const std::set<int>& ranks) const;

  MembersOf members_of_;
  std::map<std::string, std::map<int32_t, Pending>> table_;  // name -> set id -> submitters
  std::vector<Response> conflicts_;
};

}  // namespace perseus::engine
