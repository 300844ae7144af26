#include "collectives/communicator.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>

#include "collectives/slot_stores.h"
#include "common/status.h"

namespace perseus::collectives {

Communicator::Communicator(transport::Transport* transport, transport::ShmArena* arena,
                           std::vector<int> members, int group_id, const Params& params)
    : transport_(transport), members_(std::move(members)), group_id_(group_id), params_(params) {
  PERSEUS_CHECK(transport_ != nullptr, "Communicator needs a transport");
  if (members_.empty()) throw InvalidArgumentError("Communicator: the member list is empty");
  std::vector<int> sorted = members_;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end() || sorted.front() < 0 ||
      sorted.back() >= transport_->size()) {
    throw InvalidArgumentError(PERSEUS_STR(
        "Communicator: members must be distinct global ranks in 0.." << transport_->size() - 1));
  }
  for (int i = 0; i < size(); ++i) {
    if (members_[i] == transport_->rank()) rank_ = i;
  }
  if (rank_ < 0) {
    throw InvalidArgumentError(PERSEUS_STR("Communicator: rank "
                                           << transport_->rank()
                                           << " is not one of the members it was built for"));
  }
  if (arena != nullptr) {
    if (group_id < 0 || group_id >= transport::ShmArena::kMaxGroups) {
      throw InvalidArgumentError(PERSEUS_STR("Communicator: group id "
                                             << group_id << " is not in 0.."
                                             << transport::ShmArena::kMaxGroups - 1));
    }
    const std::vector<int>& local = arena->globalRanks();
    std::vector<int> ranks;
    for (int g : members_) {
      auto it = std::find(local.begin(), local.end(), g);
      if (it == local.end()) break;
      ranks.push_back(static_cast<int>(it - local.begin()));
    }
    if (ranks.size() == members_.size()) {  // every member is on this host
      arena_ = arena;
      arena_ranks_ = ranks;
      arena_members_sorted_ = ranks;
      std::sort(arena_members_sorted_.begin(), arena_members_sorted_.end());
    }
  }
  hosts_.assign(members_.size(), 0);
  host_arena_ = arena;
}

void Communicator::exchange(std::vector<transport::SendOp> sends,
                            std::vector<transport::RecvOp> recvs) {
  for (auto& s : sends) s.peer = members_[s.peer];
  for (auto& r : recvs) r.peer = members_[r.peer];
  transport_->exchange(sends, recvs);
}

void Communicator::sendRecv(int send_peer, const void* send_data, size_t send_bytes, int recv_peer,
                            void* recv_data, size_t recv_bytes) {
  transport_->sendRecv(send_peer < 0 ? -1 : members_[send_peer], send_data, send_bytes,
                       recv_peer < 0 ? -1 : members_[recv_peer], recv_data, recv_bytes);
}

void Communicator::setHosts(std::vector<int> host_of_member) {
  if (host_of_member.size() != members_.size()) {
    throw InvalidArgumentError(
        PERSEUS_STR("Communicator::setHosts: " << host_of_member.size() << " host indices for "
                                               << members_.size() << " members"));
  }
  std::map<int, int> per_host;
  for (int h : host_of_member) ++per_host[h];
  num_hosts_ = static_cast<int>(per_host.size());
  hosts_even_ = true;
  for (const auto& [h, n] : per_host) hosts_even_ = hosts_even_ && n == per_host.begin()->second;
  hosts_ = std::move(host_of_member);
  host_comm_.reset();
  cross_comm_.reset();
}

Communicator& Communicator::hostComm() {
  if (!host_comm_) {
    std::vector<int> local;
    for (int i = 0; i < size(); ++i) {
      if (hosts_[i] == hosts_[rank_]) local.push_back(members_[i]);
    }
    host_comm_ = std::make_unique<Communicator>(transport_, host_arena_, local, group_id_, params_);
  }
  return *host_comm_;
}

Communicator& Communicator::crossComm() {
  if (!cross_comm_) {
    // Position of each member within its host, in set-rank order.
    std::map<int, int> seen;
    std::vector<int> position(size());
    for (int i = 0; i < size(); ++i) position[i] = seen[hosts_[i]]++;
    std::vector<int> cross;
    for (int i = 0; i < size(); ++i) {
      if (position[i] == position[rank_]) cross.push_back(members_[i]);
    }
    cross_comm_ = std::make_unique<Communicator>(transport_, nullptr, cross, group_id_, params_);
  }
  return *cross_comm_;
}

void Communicator::FreeDeleter::operator()(void* p) const { std::free(p); }

void Communicator::ChooserDeleter::operator()(SlotStoreChooser* c) const { delete c; }

SlotStoreChooser& Communicator::storeChooser() {
  if (!store_chooser_) store_chooser_.reset(new SlotStoreChooser());
  return *store_chooser_;
}

void* Communicator::scratch(int index, size_t bytes) {
  PERSEUS_CHECK(index >= 0 && index < kScratchBuffers, "scratch index " << index);
  if (bytes > scratch_bytes_[index]) {
    // Grow geometrically so that a slowly growing workload settles after a few calls; touch
    // every page now rather than inside a timed collective.
    size_t grown = std::max(bytes, scratch_bytes_[index] * 2);
    grown = (grown + 4095) & ~size_t{4095};
    void* p = std::aligned_alloc(64, grown);
    if (p == nullptr) {
      throw InternalError(PERSEUS_STR("out of memory allocating "
                                      << grown << " bytes of collective scratch space"));
    }
    std::memset(p, 0, grown);
    scratch_[index].reset(p);
    scratch_bytes_[index] = grown;
  }
  return scratch_[index].get();
}

}  // namespace perseus::collectives
