// Point-to-point byte movement between the ranks of one job. Collectives are written over this
// interface (and, within a host, over ShmArena); they never see sockets or shared memory.
//
// Contract
//  - Ranks are global ranks. Between an ordered pair of ranks, bytes form one FIFO stream: a
//    receive of N bytes takes the next N bytes the peer sent, whatever the peer's call sizes.
//  - One thread drives a Transport at a time (the engine thread, or a test's rank thread).
//    wake(), ring() and abort() may be called from any thread.
//  - exchange() returns when every send has been handed off and every receive filled. It makes
//    progress on all of them at once, so rings and pairwise exchanges cannot deadlock on
//    buffer space. It spins for PERSEUS_SPIN_US, then blocks.
//  - Failures throw: PeerLostError (peer process gone, connection reset/closed, naming the
//    rank), TimeoutError (no byte moved on a pending operation for PERSEUS_TIMEOUT seconds),
//    ShutDownError (after abort()).
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

namespace perseus::transport {

struct SendOp {
  int peer;
  const void* data;
  size_t bytes;
};

struct RecvOp {
  int peer;
  void* data;
  size_t bytes;
};

class Transport {
 public:
  virtual ~Transport() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  virtual void exchange(const std::vector<SendOp>& sends, const std::vector<RecvOp>& recvs) = 0;

  // True when some peer has sent bytes that no receive has taken yet. The engine uses this to
  // join a negotiation cycle that another rank started.
  virtual bool hasIncoming() = 0;
  // Blocks until hasIncoming(), wake(), a ring of this rank's doorbell (a peer's ring()), or
  // the timeout. Spurious returns are allowed. Rings are not lost: one that came after the
  // previous waitIncoming() returned ends this one at once, so a caller may check what a peer
  // announces through shared memory and then wait, with no window for a lost ring. Spins for
  // `spin` before it blocks (kSpinSetting: PERSEUS_SPIN_US); a caller that spun itself
  // already, checking more than bytes (the engine's idle wait), passes less.
  static constexpr std::chrono::microseconds kSpinSetting{-1};
  virtual void waitIncoming(std::chrono::microseconds timeout,
                            std::chrono::microseconds spin = kSpinSetting) = 0;
  // Rings global rank `peer`'s doorbell: its waitIncoming() returns, with no bytes. For a layer
  // that published something to the peer through shared memory with a seq_cst store (the
  // peer's engine reads it with seq_cst loads after its last wait returned). Any thread. A
  // no-op where the transport reaches `peer` without a doorbell (TCP: the peer finds out at
  // its timeout).
  virtual void ring(int peer) { (void)peer; }
  virtual void wake() = 0;

  // Makes every blocked and later call throw ShutDownError(reason). Idempotent.
  virtual void abort(const std::string& reason) = 0;

  // Convenience over exchange(); a peer of -1 skips that side.
  void sendRecv(int send_peer, const void* send_data, size_t send_bytes, int recv_peer,
                void* recv_data, size_t recv_bytes);
  void send(int peer, const void* data, size_t bytes) {
    sendRecv(peer, data, bytes, -1, nullptr, 0);
  }
  void recv(int peer, void* data, size_t bytes) { sendRecv(-1, nullptr, 0, peer, data, bytes); }
};

}  // namespace perseus::transport
