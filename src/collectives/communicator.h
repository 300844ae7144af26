// A group of ranks (a process set) and the means to reach them: point-to-point through the
// job's Transport, and, when every member is on this host, the ShmArena. Communicator ranks
// are indices into members(); translation to global ranks happens here only.
//
// Thread contract: the engine thread (or a test's rank thread) only.
#pragma once

#include <memory>
#include <vector>

#include "common/params.h"
#include "transport/shm/shm_arena.h"
#include "transport/transport.h"

namespace perseus::collectives {

class Communicator {
 public:
  // `members` are global ranks in set-rank order and must contain transport->rank().
  // `arena` may be null; it is used only when every member is one of its local ranks.
  // `group_id` names this communicator's barrier flags in the arena (unique per live set).
  Communicator(transport::Transport* transport, transport::ShmArena* arena,
               std::vector<int> members, int group_id, const Params& params);

  int rank() const { return rank_; }
  int size() const { return static_cast<int>(members_.size()); }
  int globalRank(int set_rank) const { return members_[set_rank]; }
  const std::vector<int>& members() const { return members_; }
  const Params& params() const { return params_; }

  // Point-to-point in communicator ranks.
  void exchange(std::vector<transport::SendOp> sends, std::vector<transport::RecvOp> recvs);
  void sendRecv(int send_peer, const void* send_data, size_t send_bytes, int recv_peer,
                void* recv_data, size_t recv_bytes);

  // Non-null when all members share this host's arena.
  transport::ShmArena* arena() const { return arena_; }
  // Set rank -> local rank in the arena (valid when arena() is non-null).
  int arenaRank(int set_rank) const { return arena_ranks_[set_rank]; }
  const std::vector<int>& arenaMembers() const { return arena_members_sorted_; }
  int groupId() const { return group_id_; }
  transport::Transport* transport() const { return transport_; }

 private:
  transport::Transport* transport_;
  transport::ShmArena* arena_ = nullptr;
  std::vector<int> members_;
  std::vector<int> arena_ranks_;
  std::vector<int> arena_members_sorted_;
  int rank_ = -1;
  int group_id_;
  Params params_;
};

}  // namespace perseus::collectives
