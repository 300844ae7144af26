// The process sets of one engine in cycle order (by group id): the global, local and cross
// sets, and those add_process_set() created, each with its communicator where this rank is a
// member. It hands out set ids and group ids; every rank gets the same ones because every rank
// applies the same negotiated additions and removals in the same order.
//
// Contract: the Cycle, under the cycle lock. Threads that validate submissions learn of
// changes through the two callbacks, called here; their owner guards what they write.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "common/params.h"
#include "engine/cycle/process_set.h"
#include "rendezvous/world.h"
#include "transport/shm/shm_arena.h"
#include "transport/transport.h"

namespace perseus::engine {

class ProcessSetTable {
 public:
  struct Listener {
    std::function<void(const ProcessSetInfo&)> set_added;
    std::function<void(int32_t id)> set_removed;
  };
  using Map = std::map<int, std::unique_ptr<ProcessSet>>;  // by group id: the cycle order
  // The most sets add_process_set() can have created at once.
  static constexpr int kMaxAddedSets = kMaxGroups - kFirstUserGroup;

  // Creates the three built-in sets. `arena` may be null (no shared memory).
  ProcessSetTable(const rendezvous::Topology& topology, transport::Transport* transport,
                  transport::ShmArena* arena, const Params& params, Listener listener);

  ProcessSet& global() { return *sets_.at(kGlobalGroup); }
  ProcessSet* byId(int32_t id);
  const ProcessSet* byId(int32_t id) const;
  // Whether some set has an entry to negotiate or one waiting for the other ranks.
  bool pending() const;

  Map::iterator begin() { return sets_.begin(); }
  Map::iterator end() { return sets_.end(); }
  Map::const_iterator begin() const { return sets_.begin(); }
  Map::const_iterator end() const { return sets_.end(); }

  // A new set of `members` (global ranks, set-rank order) with the next set id; null when
  // kMaxAddedSets exist. A group id freed by a removal is reused only once the unused ones ran
  // out, after every rank agreed how its history in the arena continues (Note [Reused group
  // ids] in collectives/collectives.h).
  ProcessSet* add(std::vector<int> members);
  // Forgets an added set (id >= 1) whose entries were all finished; false when there is none.
  bool remove(int32_t id);

 private:
  ProcessSet& insert(int32_t id, int group, std::vector<int> members);

  transport::Transport* const transport_;
  transport::ShmArena* const arena_;
  const Params params_;
  const Listener listener_;
  Map sets_;
  int32_t next_set_id_ = 1;
  int next_group_ = kFirstUserGroup;  // group ids never used yet start here
  std::set<int> removed_groups_;
};

}  // namespace perseus::engine
