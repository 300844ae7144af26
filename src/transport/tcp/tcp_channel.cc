#include "transport/tcp/tcp_channel.h"

#include <sys/epoll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/status.h"

namespace perseus::transport::tcp {

TcpChannel::TcpChannel(int peer_rank, std::vector<Fd> sockets, size_t stripe_bytes)
    : peer_rank_(peer_rank),
      sockets_(std::move(sockets)),
      interest_(sockets_.size(), 0),
      stripe_(stripe_bytes) {
  PERSEUS_CHECK(!sockets_.empty() && stripe_ > 0, "a TCP channel needs a socket and a stripe");
  epoll_.reset(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_.valid()) {
    throw InternalError(PERSEUS_STR("epoll_create1: " << std::strerror(errno)));
  }
  for (size_t i = 0; i < sockets_.size(); ++i) {
    setNonBlocking(sockets_[i].get());
    tuneDataSocket(sockets_[i].get(), kSocketBufferBytes);
    epoll_event ev{};
    ev.data.u64 = i;
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, sockets_[i].get(), &ev) != 0) {
      throw InternalError(PERSEUS_STR("epoll_ctl(ADD): " << std::strerror(errno)));
    }
  }
  updateInterest();
}

void TcpChannel::lost(const char* cause) const {
  throw PeerLostError(
      peer_rank_, PERSEUS_STR("TCP connection to rank " << peer_rank_ << " " << cause
                                                        << "; that rank's process probably died "
                                                           "or its host became unreachable"));
}

void TcpChannel::setInterest(size_t socket, uint32_t events) {
  if (interest_[socket] == events) return;
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = socket;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, sockets_[socket].get(), &ev) != 0) {
    throw InternalError(PERSEUS_STR("epoll_ctl(MOD): " << std::strerror(errno)));
  }
  interest_[socket] = events;
}

void TcpChannel::updateInterest() {
  size_t recv_socket = socketFor(recv_offset_);
  for (size_t i = 0; i < sockets_.size(); ++i) {
    uint32_t events = 0;
    if (i == recv_socket) events |= EPOLLIN;
    if (static_cast<int>(i) == blocked_send_socket_) events |= EPOLLOUT;
    setInterest(i, events);
  }
}

size_t TcpChannel::trySend(const void* data, size_t bytes) {
  const auto* p = static_cast<const uint8_t*>(data);
  size_t done = 0;
  int blocked = -1;
  while (done < bytes) {
    size_t s = socketFor(send_offset_);
    size_t room = stripe_ - send_offset_ % stripe_;
    size_t want = std::min(bytes - done, room);
    ssize_t n = ::send(sockets_[s].get(), p + done, want, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      done += static_cast<size_t>(n);
      send_offset_ += static_cast<uint64_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      blocked = static_cast<int>(s);
      break;
    }
    lost(n < 0 ? std::strerror(errno) : "refused data");
  }
  if (blocked != blocked_send_socket_) {
    blocked_send_socket_ = blocked;
    updateInterest();
  }
  return done;
}

size_t TcpChannel::tryRecv(void* data, size_t bytes) {
  auto* p = static_cast<uint8_t*>(data);
  size_t done = 0;
  size_t first_socket = socketFor(recv_offset_);
  while (done < bytes) {
    size_t s = socketFor(recv_offset_);
    size_t room = stripe_ - recv_offset_ % stripe_;
    size_t want = std::min(bytes - done, room);
    ssize_t n = ::recv(sockets_[s].get(), p + done, want, MSG_DONTWAIT);
    if (n > 0) {
      done += static_cast<size_t>(n);
      recv_offset_ += static_cast<uint64_t>(n);
      continue;
    }
    if (n == 0) lost("was closed by the peer");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    lost(std::strerror(errno));
  }
  if (socketFor(recv_offset_) != first_socket) updateInterest();
  return done;
}

bool TcpChannel::hasIncoming() {
  uint8_t byte;
  ssize_t n = ::recv(sockets_[socketFor(recv_offset_)].get(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  // EOF and errors count as incoming, so that the next tryRecv reports the lost peer.
  return n > 0 || n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

void TcpChannel::checkPeer() {
  for (const Fd& fd : sockets_) {
    int err = 0;
    socklen_t len = sizeof(err);
    if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err != 0) {
      lost(std::strerror(err));
    }
    uint8_t byte;
    ssize_t n = ::recv(fd.get(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) lost("was closed by the peer");
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      lost(std::strerror(errno));
    }
  }
}

}  // namespace perseus::transport::tcp
