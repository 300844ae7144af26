// A Channel over one or more TCP connections to one peer.
//
// Note [TCP striping]
// The byte stream to a peer is cut into fixed chunks of `stripe_bytes`; the chunk that holds
// stream offset o travels on socket (o / stripe_bytes) % sockets. Both ends count their own
// stream offsets, so they agree on the mapping without any header on the wire, and every
// socket's bytes arrive in order. Several sockets let the kernel (and multi-queue NICs) move
// several flows at once, which a single TCP flow on a cloud network cannot saturate. Sends
// and receives follow the stream order strictly: a full socket stalls the sender even if
// another socket has room, which is what keeps the receiver's job a plain offset count.
//
// pollFd() is an epoll fd whose interest set is kept to what can make progress: readable on
// the socket that carries the next receive offset, writable on a socket a send is blocked on.
//
// Thread contract: one thread drives the channel (the transport's), as for Channel.
#pragma once

#include <cstdint>
#include <vector>

#include "transport/channel.h"
#include "transport/tcp/socket.h"

namespace perseus::transport::tcp {

constexpr size_t kDefaultStripeBytes = size_t{512} << 10;
constexpr int kSocketBufferBytes = 4 << 20;

class TcpChannel : public Channel {
 public:
  // Takes connected, authenticated sockets, in stripe order (sockets[i] carries chunks i, i+n,
  // ...). They are made non-blocking and tuned here. `peer_rank` names the peer in errors.
  TcpChannel(int peer_rank, std::vector<Fd> sockets, size_t stripe_bytes = kDefaultStripeBytes);

  size_t trySend(const void* data, size_t bytes) override;
  size_t tryRecv(void* data, size_t bytes) override;
  bool hasIncoming() override;
  int pollFd() const override { return epoll_.get(); }
  void checkPeer() override;

  int peerRank() const { return peer_rank_; }
  size_t sockets() const { return sockets_.size(); }

 private:
  size_t socketFor(uint64_t offset) const { return (offset / stripe_) % sockets_.size(); }
  [[noreturn]] void lost(const char* cause) const;
  void setInterest(size_t socket, uint32_t events);
  void updateInterest();

  int peer_rank_;
  std::vector<Fd> sockets_;
  std::vector<uint32_t> interest_;  // events currently registered per socket
  size_t stripe_;
  uint64_t send_offset_ = 0;
  uint64_t recv_offset_ = 0;
  int blocked_send_socket_ = -1;
  Fd epoll_;
};

}  // namespace perseus::transport::tcp
