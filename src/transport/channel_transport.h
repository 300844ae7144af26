// Transport over one non-blocking Channel per peer rank (shm/ and tcp/ provide channels).
// Transport-neutral: it knows channels only through the Channel interface, plus an optional
// Doorbell that channels without a file descriptor ring when they make progress possible.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/params.h"
#include "transport/channel.h"
#include "transport/transport.h"

namespace perseus::transport {

// How the transport's thread sleeps while waiting on channels whose pollFd() is -1, and how
// other threads (wake(), abort()) or peers interrupt that sleep. Eventcount protocol:
//   ticket = arm();  re-check the condition;  then disarm() or wait(ticket, timeout).
// A ring() that happens after arm() makes wait() return promptly. arm/wait/disarm are called
// by the transport's thread only; ring() by any thread (or, for shm, any process).
class Doorbell {
 public:
  virtual ~Doorbell() = default;
  virtual uint32_t arm() = 0;
  // Sleeps until ring() or the timeout; leaves the doorbell disarmed.
  virtual void wait(uint32_t ticket, std::chrono::microseconds timeout) = 0;
  // How often it was rung so far (the value arm() returns as the ticket).
  virtual uint32_t rings() = 0;
  virtual void disarm() = 0;
  virtual void ring() = 0;
  // True when the processes that ring each other share fewer cores than they number: waiters
  // then yield the core on every idle pass instead of busy-polling (shm/cpu_budget.h).
  virtual bool oversubscribed() const { return false; }
};

// A process-local Doorbell (mutex + condition variable) for when no channel provides one.
class LocalDoorbell : public Doorbell {
 public:
  uint32_t arm() override;
  void wait(uint32_t ticket, std::chrono::microseconds timeout) override;
  uint32_t rings() override;
  void disarm() override {}
  void ring() override;

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  // Changed under mutex_ (for the waiters); read without it by rings(), which spinning
  // waiters call on every pass.
  std::atomic<uint32_t> seq_{0};
};

class ChannelTransport : public Transport {
 public:
  // `channels[r]` reaches global rank r; channels[rank] is null (self-sends are copied in
  // memory). A null channel for another rank makes operations with that rank invalid.
  // `doorbell` is rung by the fd-less channels (e.g. ShmLocalGroup::doorbell); when null,
  // fd-less channels are re-polled every ~100 µs while blocked.
  ChannelTransport(int rank, std::vector<std::unique_ptr<Channel>> channels, const Params& params,
                   std::shared_ptr<Doorbell> doorbell = nullptr);
  ~ChannelTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(channels_.size()); }

  void exchange(const std::vector<SendOp>& sends, const std::vector<RecvOp>& recvs) override;
  bool hasIncoming() override;
  void waitIncoming(std::chrono::microseconds timeout,
                    std::chrono::microseconds spin = kSpinSetting) override;
  void ring(int peer) override;
  void wake() override;
  void abort(const std::string& reason) override;

 private:
  struct PendingOp {
    Channel* channel;
    char* data;
    size_t left;
    size_t bytes;
    int peer;
    bool is_send;
  };

  void validate(int peer, size_t bytes, const void* data, const char* what) const;
  void copySelf(const std::vector<SendOp>& sends, const std::vector<RecvOp>& recvs);
  bool progressPass();
  // Sleeps for at most `limit` while nothing can move; returns early when something might.
  // Returns true if the exchange made progress in its re-check (so the caller resets its
  // idle clock). An idle wait given `since_rings` does not sleep once the doorbell's count moved
  // from it.
  bool blockOnce(bool for_exchange, std::chrono::microseconds limit,
                 const uint32_t* since_rings = nullptr);
  void checkPeers();
  [[noreturn]] void throwTimeout(double idle_s) const;
  void checkAborted() const;
  void drainEventFd();

  const int rank_;
  std::vector<std::unique_ptr<Channel>> channels_;
  const std::chrono::microseconds spin_;
  const std::chrono::duration<double> timeout_;
  const bool doorbell_is_external_;  // rung by channels, so sleeps need no short slices
  std::shared_ptr<Doorbell> doorbell_;
  const bool yield_when_idle_;  // doorbell_->oversubscribed(): busy-polls yield the core
  // The doorbell's count when the last waitIncoming() returned: a ring after that ends the
  // next one at once (the transport's thread only).
  uint32_t seen_rings_;
  bool any_fd_channel_ = false;
  bool any_fdless_channel_ = false;
  int event_fd_ = -1;  // wake() makes poll() return; only when some channel has a pollFd

  // Per-exchange state, kept as members so a steady-state exchange allocates nothing.
  std::vector<PendingOp> ops_;
  std::vector<uint64_t> peer_busy_pass_;  // per rank: last pass in which an op was in flight
  uint64_t pass_ = 0;
  size_t ops_left_ = 0;

  // Bytes sent to self that no self-receive has taken yet (FIFO), starting at self_read_.
  std::vector<char> self_buffer_;
  size_t self_read_ = 0;

  std::atomic<bool> wake_pending_{false};
  std::atomic<bool> aborted_{false};
  mutable std::mutex abort_mutex_;
  std::string abort_reason_;
};

}  // namespace perseus::transport
