// Client of TcpStoreServer implementing Store: one authenticated connection, one request in
// flight at a time (a mutex serialises callers, so any thread may use it).
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "rendezvous/store.h"
#include "rendezvous/store_protocol.h"
#include "transport/tcp/auth.h"
#include "transport/tcp/socket.h"

namespace perseus::rendezvous {

class TcpStoreClient : public Store {
 public:
  // Connects (retrying until `connect_timeout`, as the server may start after this rank) and
  // authenticates. Throws TimeoutError, AuthError, InvalidArgumentError (bad address/secret).
  TcpStoreClient(const std::string& host, int port, const std::string& secret_hex,
                 std::chrono::milliseconds connect_timeout);
  // One connection attempt within `connect_timeout`, for trying candidate ports in turn: null
  // when nothing listens there (refused, or no answer in time). A connection that was accepted
  // gets `handshake_timeout` for the handshake, however little of `connect_timeout` is left,
  // so that a slow store is never taken for one with another secret. Throws AuthError (not
  // this job's store) and TimeoutError (the handshake did not finish).
  static std::unique_ptr<TcpStoreClient> tryConnect(const std::string& host, int port,
                                                    const std::string& secret_hex,
                                                    std::chrono::milliseconds connect_timeout,
                                                    std::chrono::milliseconds handshake_timeout);

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> get(const std::string& key, std::chrono::milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  // Non-blocking lookup: false when the key does not exist yet.
  bool check(const std::string& key, std::vector<uint8_t>* value);

 private:
  TcpStoreClient(transport::tcp::Fd fd, std::string what)
      : what_(std::move(what)), fd_(std::move(fd)) {}
  protocol::Response call(const protocol::Request& request, std::chrono::milliseconds wait);

  std::mutex mu_;
  std::string what_;  // "rendezvous store at host:port", for messages
  transport::tcp::Fd fd_;
  std::vector<uint8_t> in_;
};

}  // namespace perseus::rendezvous
