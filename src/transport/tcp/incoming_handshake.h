// The accepting side of Note [Connection handshake] for servers that multiplex many sockets in
// one poll loop (the store server, the data-plane acceptor): a garbage, slow or silent peer
// costs one pollfd until its deadline, never a blocked thread.
//
// Thread contract: owned and stepped by one thread (the poll loop's).
#pragma once

#include <poll.h>

#include <string>

#include "transport/tcp/auth.h"

namespace perseus::transport::tcp {

class IncomingHandshake {
 public:
  enum class State { kPending, kDone, kFailed };

  // `fd` is a freshly accepted socket; it is made non-blocking here.
  IncomingHandshake(Fd fd, const Secret& secret, Clock::time_point deadline);

  // Reads and writes what it can without blocking. After kFailed, error() says why (and the
  // caller logs it with peer()); after kDone, hello() holds the verified hello and takeFd()
  // hands the authenticated socket over.
  State step();
  short pollEvents() const { return responder_.outbox().empty() ? POLLIN : POLLOUT; }
  int fd() const { return fd_.get(); }
  Fd takeFd() { return std::move(fd_); }
  const Hello& hello() const { return responder_.hello(); }
  const std::string& peer() const { return peer_; }
  const std::string& error() const { return error_; }
  Clock::time_point deadline() const { return deadline_; }
  bool expired(Clock::time_point now) const { return now >= deadline_; }

 private:
  State fail(const std::string& why);

  Fd fd_;
  AuthResponder responder_;
  Clock::time_point deadline_;
  size_t out_sent_ = 0;
  std::string peer_;
  std::string error_;
};

}  // namespace perseus::transport::tcp
