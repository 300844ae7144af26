// Point-to-point byte movement between the ranks of one job. Collectives are written over this
// interface (and, within a host, over ShmArena); they never see sockets or shared memory.
//
// Contract
//  - Ranks are global ranks. Between an ordered pair of ranks, bytes form one FIFO stream: a
//    receive of N bytes takes the next N bytes the peer sent, whatever the peer's call sizes.
//  - One thread drives a Transport at a time (the engine thread, or a test's rank thread).
//    wake() and abort() may be called from any thread.
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
  // Blocks until hasIncoming(), wake(), or the timeout. Spurious returns are allowed.
  virtual void waitIncoming(std::chrono::microseconds timeout) = 0;
  // Rings of this rank's doorbell by local peers so far (ShmArena::notify(), which carries no
  // bytes: a post that completed a generation, Note [Posted collectives]); 0 without one.
  virtual uint32_t rings() { return 0; }
  // waitIncoming() that also returns once rings() differs from `since` (read `since` before
  // checking what the ring announces, so that a ring between that check and the sleep is
  // seen), and spins for `spin` at most, not PERSEUS_SPIN_US, before it blocks: the engine's
  // idle wait spins itself first (checking more than bytes) and is called again every 2 ms
  // while posts are pending, when a spin here too took the caller's core.
  virtual void waitIncoming(std::chrono::microseconds timeout, uint32_t since,
                            std::chrono::microseconds spin) {
    (void)since;
    (void)spin;
    waitIncoming(timeout);
  }
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
