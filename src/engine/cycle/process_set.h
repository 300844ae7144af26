// The cycle's state for one process set: its communicator, response cache,
// coordinator (on set rank 0), fusion buffer and this rank's entries. See cycle.h for the
// cycle that drives it.
//
// Thread contract: the Cycle, under the cycle lock (cycle.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "collectives/communicator.h"
#include "engine/entry.h"
#include "engine/exec/executor.h"
#include "negotiation/control.h"
#include "negotiation/coordinator.h"
#include "negotiation/response_cache.h"

namespace perseus::engine {

// Group ids double as the set's bit in the global control vector and its barrier flags in
// the shared-memory arena.
constexpr int kGlobalGroup = 0;
constexpr int kLocalGroup = 1;
constexpr int kCrossGroup = 2;
constexpr int kFirstUserGroup = 3;
constexpr int kMaxGroups = 64;

// The built-in sets' ids (Engine::kGlobalSet, kLocalSet, kCrossSet); added sets count from 1.
constexpr int32_t kGlobalSetId = 0;
constexpr int32_t kLocalSetId = -1;
constexpr int32_t kCrossSetId = -2;

// A set as the submitting threads see it (Engine::processSet).
struct ProcessSetInfo {
  int32_t id = 0;
  std::vector<int> members;  // global ranks
  int rank = -1;             // this rank's set rank, -1 when not a member
};

struct ProcessSet {
  ProcessSet(int32_t id, int group_id, std::vector<int> members, int global_rank,
             size_t cache_capacity);

  bool member() const { return rank >= 0; }
  // True when this rank must take part in the set's negotiation this cycle.
  bool hasWork() const;
  // entries[e's name] = e, in a node that an earlier take() kept if any: the name's copy then
  // reuses that node's storage.
  void adopt(std::unique_ptr<Entry> e);
  // Removes `name`'s entry and returns it (null when there is none), keeping its node.
  std::unique_ptr<Entry> take(const std::string& name);

  const int32_t id;
  const int group_id;
  const std::vector<int> members;  // global ranks in set-rank order
  const int rank;                  // this rank's set rank, -1 when not a member

  std::unique_ptr<collectives::Communicator> comm;  // members only
  ResponseCache cache;
  std::unique_ptr<Coordinator> coordinator;  // set rank 0 only
  FusionBuffer fusion;
  ControlVector control;  // the negotiation's, rewritten every cycle (its words stay allocated)

  using EntryMap = std::unordered_map<std::string, std::unique_ptr<Entry>>;
  EntryMap entries;                              // by name, in flight
  std::vector<EntryMap::node_type> spare_nodes;  // take()'s, emptied, for adopt()
  // The last negotiation's responses, kept after they ran so that the next one copies its
  // cached responses over them (SetNegotiator::Agreement).
  std::vector<Response> agreed;
  std::vector<Entry*> fresh;     // submitted since the last negotiation, not yet classified
  std::vector<Entry*> uncached;  // to send to the coordinator at the next chance
  bool joined = false;           // global set: this rank called join() and it is not done
  bool any_joined = false;       // global set: some rank had joined at the last negotiation
  bool posts_refused = false;    // global set: some rank cannot post (for good, from one cycle)
  std::chrono::steady_clock::time_point next_stall_check{};
  std::chrono::steady_clock::time_point last_stall_warning{};
  std::chrono::steady_clock::time_point last_diagnosis{};
};

}  // namespace perseus::engine
