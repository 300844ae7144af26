// The engine's side of the cross-set name check (set_conflict.h): every rank's new requests
// of the other process sets travel with the global negotiation to global rank 0, whose check
// finds a name in flight on two sets that wait for each other; the conflict comes back as an
// error response and fails the name on every rank, in whichever set it is in flight there, or
// at this rank's next submission of it.
//
// Contract: the Cycle and its Negotiator, under the cycle lock.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/cycle/set_table.h"
#include "negotiation/set_conflict.h"

namespace perseus::engine {

class CrossSetNames {
 public:
  // Completes an entry of `set` with an error (the Cycle's finish).
  using Fail =
      std::function<void(ProcessSet& set, Entry* e, StatusCode code, const std::string& message)>;
  CrossSetNames(ProcessSetTable& sets, int global_rank, Fail fail)
      : sets_(sets), rank_(global_rank), fail_(std::move(fail)) {}

  // This rank's new uncached requests of the other sets, to send with the global negotiation
  // (each request once).
  std::vector<Request> announce();
  // Global rank 0, global set: feeds set rank `set_rank`'s list to the check and returns the
  // requests of the global set itself. Other sets: `list` unchanged.
  std::vector<Request> check(const ProcessSet& set, int set_rank, std::vector<Request> list);
  // Global rank 0: the conflicts found since the last call, as error responses.
  std::vector<Response> takeConflicts();
  // Every rank: fails the names of the cross-set responses in `responses` and removes those
  // responses. A name not in flight here fails at its next submission (takeConflict).
  void failConflicts(std::vector<Response>* responses);
  // The error of a newly drained request whose name a conflict failed before this rank
  // submitted it, consumed; nullopt when there is none.
  std::optional<std::string> takeConflict(const ProcessSet& set, const Request& q);

 private:
  // "<op> '<name>' in process set <id> on rank <r>: <cause>".
  std::string failure(const Request& q, int32_t set_id, const std::string& cause) const;

  ProcessSetTable& sets_;
  const int rank_;
  const Fail fail_;
  std::unique_ptr<SetConflictCheck> check_;  // global rank 0, created on first use
  // Names failed before this rank submitted them (a member of either set): the next
  // submission of the name fails with this message instead of waiting.
  std::map<std::string, std::string> conflicted_names_;
};

}  // namespace perseus::engine
