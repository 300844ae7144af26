// The coordinator's side of negotiation, as pure functions over request lists (no network,
// no clock of its own): set rank 0 of each process set feeds it the requests that every set
// rank sent in a cycle and gets back the responses for the names that are now complete.
//
// Contract
//  - A name is complete when every set rank that has not joined requested it.
//  - Responses come out in a deterministic order (the order in which names were first
//    requested, counting rank 0's list first, then rank 1's, ...), so every rank executes the
//    same collectives in the same order.
//  - Ranks that disagree on a name's metadata get an error response (MismatchError code)
//    naming the tensor, the op and the ranks that differ; the set stays usable.
//  - Join (Note [Join]): a rank that joined counts as having requested every allreduce (it
//    contributes zeros), allgather (it contributes no rows) and broadcast whose root has not
//    joined (it receives and drops); alltoall and reducescatter fail while a rank has joined,
//    as in Horovod. When every rank has joined, a JOIN response names the last rank to join.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "negotiation/request.h"

namespace perseus::engine {

// Builds the response for one name from each set rank's request (nullptr for a joined rank).
// At least one entry is non-null.
Response constructResponse(const std::string& name, const std::vector<const Request*>& by_rank);

class Coordinator {
 public:
  using Clock = std::chrono::steady_clock;

  explicit Coordinator(int set_size);

  // Adds what set rank `rank` sent this cycle. Call for ranks in ascending order. A name waits
  // from its earliest submission (`now` less the request's waited_s).
  void add(int rank, const std::vector<Request>& requests, Clock::time_point now);
  // The responses of every name that became complete, in the deterministic order above.
  std::vector<Response> takeReady();

  struct Stall {
    std::string name;
    OpType op;
    std::vector<int> missing_ranks;  // set ranks that have neither requested it nor joined
    double waited_s;
    std::vector<TensorMeta> tensors;  // as the lowest submitting set rank sent them
  };
  // Names that have waited on some ranks for longer than `older_than_s`.
  std::vector<Stall> stalls(Clock::time_point now, double older_than_s) const;
  // The same, less the names an earlier call already returned (up to `max` of them, oldest
  // first): each stall is diagnosed once while it lasts.
  std::vector<Stall> takeUndiagnosed(Clock::time_point now, double older_than_s, size_t max);
  // Error responses (code `code`) for every waiting name older than `older_than_s`; they
  // leave the table.
  std::vector<Response> failStalled(Clock::time_point now, double older_than_s, StatusCode code,
                                    const std::string& why);

  // Forgets `name` (the global check failed it on every rank); false if it was not waiting.
  bool erase(const std::string& name) { return table_.erase(name) > 0; }
  size_t numWaiting() const { return table_.size(); }
  int numJoined() const { return num_joined_; }

 private:
  struct Waiting {
    uint64_t seq = 0;
    Clock::time_point first_seen;
    std::vector<Request> by_rank;
    std::vector<bool> present;
    int count = 0;
    bool diagnosed = false;
  };

  int size_;
  std::map<std::string, Waiting> table_;
  std::vector<bool> joined_;
  int num_joined_ = 0;
  int last_joined_ = -1;
  bool join_done_ = false;
  uint64_t next_seq_ = 0;
};

}  // namespace perseus::engine
