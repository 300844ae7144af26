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

class SlotStoreChooser;

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

  // --- Hosts (for hierarchical algorithms) -------------------------------------------------
  // Host index of every member, in set-rank order (equal index = same host). Optional: without
  // it the communicator is treated as one flat group. Call before the first collective, with
  // the same vector on every member (e.g. from rendezvous::Topology::hostnames).
  void setHosts(std::vector<int> host_of_member);
  const std::vector<int>& hosts() const { return hosts_; }
  int numHosts() const { return num_hosts_; }
  // True when every host has the same number of members.
  bool hostsEven() const { return hosts_even_; }
  // Sub-communicators, made on first use and kept (every member must first use them in the
  // same collective): this rank's host (it uses the arena, under this communicator's group id,
  // which the parent never uses since it spans hosts), and the members with this rank's
  // position within its host on every host (valid when hostsEven()).
  Communicator& hostComm();
  Communicator& crossComm();

  // How this communicator's shared-memory collectives write their slots (slot_stores.h).
  SlotStoreChooser& storeChooser();
  // Single-copy reads (single_copy_shm.cc) failed for some member once: every member learnt it
  // in the same call, so all of them stop choosing them together.
  bool singleCopyFailed() const { return single_copy_failed_; }
  void setSingleCopyFailed() { single_copy_failed_ = true; }
  // Every member read every other's memory once (Note [Single-copy allreduce]): algorithms
  // that overwrite their input may then rely on single-copy reads without asking first.
  bool singleCopyAgreed() const { return single_copy_agreed_; }
  void setSingleCopyAgreed() { single_copy_agreed_ = true; }

  // --- Scratch memory -----------------------------------------------------------------------
  // Buffer `index` (0 .. kScratchBuffers-1) of at least `bytes`, 64-byte aligned. It only
  // grows, so steady-state collectives neither allocate nor page-fault. Valid until the next
  // scratch() call with the same index that grows it.
  static constexpr int kScratchBuffers = 3;
  void* scratch(int index, size_t bytes);

 private:
  transport::Transport* transport_;
  transport::ShmArena* arena_ = nullptr;
  transport::ShmArena* host_arena_ = nullptr;  // as given, for hostComm()
  std::vector<int> members_;
  std::vector<int> arena_ranks_;
  std::vector<int> arena_members_sorted_;
  int rank_ = -1;
  int group_id_;
  Params params_;
  std::vector<int> hosts_;
  int num_hosts_ = 1;
  bool hosts_even_ = true;
  std::unique_ptr<Communicator> host_comm_;
  std::unique_ptr<Communicator> cross_comm_;
  struct FreeDeleter {
    void operator()(void* p) const;
  };
  std::unique_ptr<void, FreeDeleter> scratch_[kScratchBuffers];
  struct ChooserDeleter {
    void operator()(SlotStoreChooser* c) const;
  };
  std::unique_ptr<SlotStoreChooser, ChooserDeleter> store_chooser_;
  size_t scratch_bytes_[kScratchBuffers] = {};
  bool single_copy_failed_ = false;
  bool single_copy_agreed_ = false;
};

}  // namespace perseus::collectives
