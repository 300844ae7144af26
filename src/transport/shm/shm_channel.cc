#include "transport/shm/shm_channel.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace perseus::transport::shm {
namespace {

// Granularity at which a large copy publishes its progress to the other side.
constexpr size_t kPublishBytes = 16 << 10;

}  // namespace

ShmChannel::ShmChannel(std::shared_ptr<ShmSegmentSet> set, int peer_local_rank)
    : set_(std::move(set)),
      me_(set_->localRank()),
      peer_(peer_local_rank),
      capacity_(set_->layout().ring_bytes),
      out_(set_->ring(peer_, me_)),
      out_data_(set_->ringData(peer_, me_)),
      in_(set_->ring(me_, peer_)),
      in_data_(set_->ringData(me_, peer_)) {
  // A channel is created once, before any traffic; resume from whatever is published anyway.
  out_tail_ = out_->tail.load(std::memory_order_relaxed);
  out_head_cache_ = out_->head.load(std::memory_order_seq_cst);
  in_head_ = in_->head.load(std::memory_order_relaxed);
  in_tail_cache_ = in_->tail.load(std::memory_order_seq_cst);
}

size_t ShmChannel::trySend(const void* data, size_t bytes) {
  uint64_t space = capacity_ - (out_tail_ - out_head_cache_);
  if (space < bytes) {
    out_head_cache_ = out_->head.load(std::memory_order_seq_cst);
    space = capacity_ - (out_tail_ - out_head_cache_);
  }
  const size_t n = static_cast<size_t>(std::min<uint64_t>(space, bytes));
  send_blocked_ = n < bytes;
  if (n == 0) return 0;
  // Publish every kPublishBytes so that the receiver copies out while we still copy in, and
  // the bytes in flight stay in cache.
  const char* src = static_cast<const char*>(data);
  for (size_t done = 0; done < n;) {
    const size_t at = static_cast<size_t>(out_tail_ % capacity_);
    const size_t k = std::min({n - done, static_cast<size_t>(capacity_) - at, kPublishBytes});
    std::memcpy(out_data_ + at, src + done, k);
    done += k;
    out_tail_ += k;
    // seq_cst: orders this store before notify()'s load of the peer's sleeper count.
    out_->tail.store(out_tail_, std::memory_order_seq_cst);
  }
  set_->notify(peer_);
  return n;
}

size_t ShmChannel::tryRecv(void* data, size_t bytes) {
  uint64_t avail = in_tail_cache_ - in_head_;
  if (avail < bytes) {
    in_tail_cache_ = in_->tail.load(std::memory_order_seq_cst);
    avail = in_tail_cache_ - in_head_;
  }
  const size_t n = static_cast<size_t>(std::min<uint64_t>(avail, bytes));
  recv_blocked_ = n < bytes;
  if (n == 0) return 0;
  char* dst = static_cast<char*>(data);
  for (size_t done = 0; done < n;) {
    const size_t at = static_cast<size_t>(in_head_ % capacity_);
    const size_t k = std::min({n - done, static_cast<size_t>(capacity_) - at, kPublishBytes});
    std::memcpy(dst + done, in_data_ + at, k);
    done += k;
    in_head_ += k;
    in_->head.store(in_head_, std::memory_order_seq_cst);
  }
  set_->notify(peer_);  // it may sleep waiting for ring space
  return n;
}

bool ShmChannel::hasIncoming() {
  if (in_tail_cache_ != in_head_) return true;
  in_tail_cache_ = in_->tail.load(std::memory_order_seq_cst);
  return in_tail_cache_ != in_head_;
}

void ShmChannel::checkPeer() {
  std::string why;
  if (!set_->peerGone(peer_, &why)) return;
  // Bytes it wrote before closing are still valid: let a pending receive take them first.
  if (recv_blocked_ && !send_blocked_ && hasIncoming()) return;
  set_->throwPeerLost(
      peer_, why,
      send_blocked_ ? "sending to it over shared memory" : "receiving from it over shared memory");
}

}  // namespace perseus::transport::shm
