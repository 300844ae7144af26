#include "transport/shm/shm_doorbell.h"

#include "transport/shm/futex.h"

namespace perseus::transport::shm {

uint32_t ShmDoorbell::arm() {
  SegmentHeader* h = set_->header(set_->localRank());
  const uint32_t ticket = h->doorbell.load(std::memory_order_acquire);
  // Pairs with ShmSegmentSet::notify() (seq_cst store, then seq_cst load of `sleepers`): the
  // caller's re-check after arm() sees everything published by a notifier that did not see
  // us as a sleeper.
  h->sleepers.fetch_add(1, std::memory_order_seq_cst);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return ticket;
}

void ShmDoorbell::wait(uint32_t ticket, std::chrono::microseconds timeout) {
  SegmentHeader* h = set_->header(set_->localRank());
  futexWait(&h->doorbell, ticket, timeout);
  h->sleepers.fetch_sub(1, std::memory_order_relaxed);
}

void ShmDoorbell::disarm() {
  set_->header(set_->localRank())->sleepers.fetch_sub(1, std::memory_order_relaxed);
}

void ShmDoorbell::ring() { set_->notify(set_->localRank()); }

}  // namespace perseus::transport::shm
