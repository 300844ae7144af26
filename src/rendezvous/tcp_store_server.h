// The rendezvous store server: one thread, one poll loop, any number of clients. Started by
// the launcher (perseus_store_server_start in the C API, for perseusrun) or by rank 0 when
// Open MPI started the job on one host (see store_from_env.cc).
//
// Every connection must pass Note [Connection handshake] within the handshake timeout; one that
// fails is logged (with its address) and closed, and the loop keeps serving the others.
// Requests are Note [Store frames]; a malformed frame closes only that connection.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "transport/tcp/auth.h"
#include "transport/tcp/socket.h"

namespace perseus::rendezvous {

struct TcpStoreServerOptions {
  // A connection that has not authenticated by then is dropped.
  std::chrono::milliseconds handshake_timeout{10000};
};

class TcpStoreServer {
 public:
  using Options = TcpStoreServerOptions;

  // Binds `bind_host`:`port` (port 0 picks a free one) and starts serving on a new thread.
  // `secret_hex` is the job secret. Throws InvalidArgumentError when it cannot bind.
  static std::unique_ptr<TcpStoreServer> start(const std::string& bind_host, int port,
                                               const std::string& secret_hex,
                                               Options options = Options());
  ~TcpStoreServer();  // stops
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  int port() const { return address_.port(); }
  const transport::tcp::SockAddr& address() const { return address_; }
  // Closes every connection and joins the thread. Idempotent; any thread but the server's.
  void stop();

 private:
  class Loop;
  TcpStoreServer() = default;

  transport::tcp::SockAddr address_;
  transport::tcp::Fd wake_;  // eventfd that interrupts the poll loop on stop()
  std::atomic<bool> stopping_{false};
  std::unique_ptr<Loop> loop_;
  std::thread thread_;
};

}  // namespace perseus::rendezvous
