// TEST SUPPORT ONLY. An in-process Transport for ranks-as-threads tests: every ordered pair of
// ranks has a bounded byte queue in one shared InProcFabric. Bounded (kDefaultCapacity bytes per
// pair) so that an algorithm relying on unbounded buffering deadlocks here as it would on a
// real transport; exchange() progresses all its sends and receives together, as the Transport
// contract requires. Follows the real transports' error contract: TimeoutError after
// Params::timeout_s without progress, ShutDownError after abort(), PeerLostError for a rank
// marked lost with InProcFabric::loseRank().
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/params.h"
#include "transport/transport.h"

namespace perseus::testing {

class InProcFabric {
 public:
  static constexpr size_t kDefaultCapacity = 64 * 1024;
  explicit InProcFabric(int size, size_t capacity = kDefaultCapacity);

  int size() const { return size_; }
  // Every later or blocked operation involving `rank` throws PeerLostError naming it.
  void loseRank(int rank);
  // Every transport of this fabric throws ShutDownError(reason) from now on.
  void abortAll(const std::string& reason);

 private:
  friend class InProcTransport;
  struct Queue {
    std::deque<unsigned char> bytes;
  };
  Queue& queue(int from, int to) { return queues_[static_cast<size_t>(from) * size_ + to]; }

  const int size_;
  const size_t capacity_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Queue> queues_;
  std::vector<bool> lost_;
  std::string abort_reason_;
};

class InProcTransport : public transport::Transport {
 public:
  InProcTransport(std::shared_ptr<InProcFabric> fabric, int rank, const Params& params);

  int rank() const override { return rank_; }
  int size() const override { return fabric_->size(); }
  void exchange(const std::vector<transport::SendOp>& sends,
                const std::vector<transport::RecvOp>& recvs) override;
  bool hasIncoming() override;
  // `spin` is ignored: it blocks on the fabric's condition variable at once.
  void waitIncoming(std::chrono::microseconds timeout,
                    std::chrono::microseconds spin = kSpinSetting) override;
  void wake() override;
  void abort(const std::string& reason) override;

 private:
  void throwIfFailed(std::unique_lock<std::mutex>& lock, int peer);

  std::shared_ptr<InProcFabric> fabric_;
  const int rank_;
  const double timeout_s_;
  bool woken_ = false;
  std::string abort_reason_;  // guarded by fabric_->mutex_
};

// One transport per rank over a fresh fabric.
std::vector<std::unique_ptr<InProcTransport>> makeInProcTransports(
    int size, const Params& params, size_t capacity = InProcFabric::kDefaultCapacity);

}  // namespace perseus::testing
