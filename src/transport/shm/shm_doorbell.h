// The Doorbell of one local rank: a futex word in its own segment that peers (ShmChannel,
// ShmArenaImpl) and local threads (wake(), abort()) ring. Only the owning rank's thread sleeps
// on it; ringing costs a fence and a load unless the owner is asleep.
#pragma once

#include <memory>

#include "transport/channel_transport.h"
#include "transport/shm/cpu_budget.h"
#include "transport/shm/shm_segment_set.h"

namespace perseus::transport::shm {

class ShmDoorbell : public Doorbell {
 public:
  explicit ShmDoorbell(std::shared_ptr<ShmSegmentSet> set);
  uint32_t arm() override;
  void wait(uint32_t ticket, std::chrono::microseconds timeout) override;
  uint32_t rings() override;
  void disarm() override;
  void ring() override;
  // The local ranks cannot each have a CPU of their own (decided once, at construction, from
  // every local rank's mask: hostCpus()).
  bool oversubscribed() const override { return host_cpus_.oversubscribed; }
  const HostCpus& hostCpus() const { return host_cpus_; }

 private:
  std::shared_ptr<ShmSegmentSet> set_;
  HostCpus host_cpus_;
};

}  // namespace perseus::transport::shm
