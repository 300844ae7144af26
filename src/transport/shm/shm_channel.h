// Channel to one peer process of this host over two lock-free single-producer single-consumer
// rings: the one this rank writes lives in the peer's segment, the one it reads in its own.
// Positions are published with release stores and read with acquire loads; each side caches
// the other side's position and reloads it only when the cached value says "full" or "empty",
// so a steady stream touches the shared control lines once per call, not per byte.
//
// Thread contract: one thread drives a ShmChannel (the transport's thread).
#pragma once

#include <cstdint>
#include <memory>

#include "transport/channel.h"
#include "transport/shm/shm_segment_set.h"

namespace perseus::transport::shm {

class ShmChannel : public Channel {
 public:
  ShmChannel(std::shared_ptr<ShmSegmentSet> set, int peer_local_rank);

  size_t trySend(const void* data, size_t bytes) override;
  size_t tryRecv(void* data, size_t bytes) override;
  bool hasIncoming() override;
  int pollFd() const override { return -1; }
  // Throws PeerLostError when the peer closed or died, unless what it sent before that is
  // still waiting to be received (the receive then drains it first).
  void checkPeer() override;
  // Moves the peer's doorbell count whether or not it sleeps: a peer that spins sees it too.
  void ring() override { set_->alert(peer_); }

 private:
  std::shared_ptr<ShmSegmentSet> set_;
  const int me_;
  const int peer_;
  const uint64_t capacity_;

  RingControl* out_;  // in the peer's segment; we are the only producer
  char* out_data_;
  uint64_t out_tail_ = 0;
  uint64_t out_head_cache_ = 0;
  bool send_blocked_ = false;  // last trySend could not take everything

  RingControl* in_;  // in our segment; we are the only consumer
  char* in_data_;
  uint64_t in_head_ = 0;
  uint64_t in_tail_cache_ = 0;
  bool recv_blocked_ = false;
};

}  // namespace perseus::transport::shm
