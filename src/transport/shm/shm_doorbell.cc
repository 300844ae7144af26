#include "transport/shm/shm_doorbell.h"

#include "transport/shm/futex.h"

namespace perseus::transport::shm {

ShmDoorbell::ShmDoorbell(std::shared_ptr<ShmSegmentSet> set)
    : set_(std::move(set)), host_cpus_(shm::hostCpus(set_->cpuMasks())) {}

uint32_t ShmDoorbell::arm() {
  SegmentHeader* h = set_->header(set_->localRank());
  const uint32_t ticket = h->doorbell.load(std::memory_order_acquire);
  // Dekker with ShmSegmentSet::notify(): the notifier stores (seq_cst) what it publishes, then
  // loads `sleepers` (seq_cst); we increment `sleepers` (seq_cst), then the caller re-checks
  // with seq_cst loads. In the single total order of these four, either the notifier sees us
  // or our re-check sees its data. (No fence: ThreadSanitizer does not model fences.)
  h->sleepers.fetch_add(1, std::memory_order_seq_cst);
  return ticket;
}

void ShmDoorbell::wait(uint32_t ticket, std::chrono::microseconds timeout) {
  SegmentHeader* h = set_->header(set_->localRank());
  futexWait(&h->doorbell, ticket, timeout);
  h->sleepers.fetch_sub(1, std::memory_order_relaxed);
}

uint32_t ShmDoorbell::rings() {
  return set_->header(set_->localRank())->doorbell.load(std::memory_order_seq_cst);
}

void ShmDoorbell::disarm() {
  set_->header(set_->localRank())->sleepers.fetch_sub(1, std::memory_order_relaxed);
}

void ShmDoorbell::ring() { set_->notify(set_->localRank()); }

}  // namespace perseus::transport::shm
