// Connects one rank to its TCP peers at start-up: a listener per rank, and authenticated
// connections where the lower rank of each pair connects to the higher one.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "transport/tcp/auth.h"
#include "transport/tcp/socket.h"
#include "transport/tcp/tcp_channel.h"

namespace perseus::transport::tcp {

// The data-plane listener of this rank, opened before its address is published so that peers
// that connect early wait in the backlog instead of being refused.
class TcpListener {
 public:
  // Any free port when port_lo == 0, else the first free one in port_lo..port_hi
  // (PERSEUS_PORT_RANGE). Throws InvalidArgumentError when none is free.
  explicit TcpListener(const std::string& host, int port_lo = 0, int port_hi = 0);
  const SockAddr& address() const { return address_; }
  int fd() const { return fd_.get(); }

 private:
  Fd fd_;
  SockAddr address_;
};

struct MeshOptions {
  int connections = 2;  // sockets per pair (PERSEUS_TCP_CONNECTIONS); the connecting side's wins
  size_t stripe_bytes = kDefaultStripeBytes;
  Clock::time_point deadline;
};

// Returns one channel per rank of `peers` (rank -> published address). Accepts from lower
// ranks on a helper thread (garbage or wrong-secret connections are logged and dropped) while
// connecting to higher ranks on the calling thread. Throws TimeoutError naming the ranks that
// did not connect by the deadline, AuthError if a peer fails authentication.
std::map<int, std::unique_ptr<TcpChannel>> connectTcpPeers(int rank, TcpListener& listener,
                                                           const std::map<int, SockAddr>& peers,
                                                           const Secret& secret,
                                                           const MeshOptions& options);

}  // namespace perseus::transport::tcp
