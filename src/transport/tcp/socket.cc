#include "transport/tcp/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <thread>

#include "common/status.h"

namespace perseus::transport::tcp {

Fd& Fd::operator=(Fd&& other) noexcept {
  if (this != &other) reset(other.release());
  return *this;
}

void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

SockAddr SockAddr::parse(const std::string& host, int port, const std::string& what) {
  if (port < 0 || port > 65535) {
    throw InvalidArgumentError(
        PERSEUS_STR(what << ": port " << port << " is out of range 0..65535"));
  }
  std::string h = host;
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_family = AF_UNSPEC;
  addrinfo* result = nullptr;
  int rc = ::getaddrinfo(h.c_str(), nullptr, &hints, &result);
  if (rc != 0 || result == nullptr) {
    throw InvalidArgumentError(
        PERSEUS_STR(what << ": cannot resolve host '" << host << "': " << ::gai_strerror(rc)));
  }
  // Prefer IPv4: the hosts in a training cluster are reliably reachable over it.
  const addrinfo* pick = result;
  for (const addrinfo* ai = result; ai != nullptr; ai = ai->ai_next) {
    if (ai->ai_family == AF_INET) {
      pick = ai;
      break;
    }
  }
  SockAddr out;
  std::memcpy(&out.storage, pick->ai_addr, pick->ai_addrlen);
  out.length = pick->ai_addrlen;
  ::freeaddrinfo(result);
  out.setPort(port);
  return out;
}

SockAddr SockAddr::parse(const std::string& host_port, const std::string& what) {
  size_t colon = host_port.rfind(':');
  if (colon == std::string::npos || colon + 1 == host_port.size()) {
    throw InvalidArgumentError(PERSEUS_STR(what << ": '" << host_port << "' is not host:port"));
  }
  std::string port_text = host_port.substr(colon + 1);
  char* end = nullptr;
  long port = std::strtol(port_text.c_str(), &end, 10);
  if (*end != '\0') {
    throw InvalidArgumentError(PERSEUS_STR(what << ": '" << host_port << "' has no valid port"));
  }
  return parse(host_port.substr(0, colon), static_cast<int>(port), what);
}

int SockAddr::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
  return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
}

void SockAddr::setPort(int port) {
  if (family() == AF_INET) {
    reinterpret_cast<sockaddr_in*>(&storage)->sin_port = htons(static_cast<uint16_t>(port));
  } else {
    reinterpret_cast<sockaddr_in6*>(&storage)->sin6_port = htons(static_cast<uint16_t>(port));
  }
}

std::string SockAddr::host() const {
  char text[INET6_ADDRSTRLEN] = {};
  if (family() == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr, text,
                sizeof(text));
  } else {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr, text,
                sizeof(text));
  }
  return text;
}

std::string SockAddr::str() const {
  if (family() == AF_INET6) return "[" + host() + "]:" + std::to_string(port());
  return host() + ":" + std::to_string(port());
}

bool SockAddr::isLoopback() const {
  if (family() == AF_INET) {
    uint32_t a = ntohl(reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr.s_addr);
    return (a >> 24) == 127;
  }
  return IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr);
}

namespace {

[[noreturn]] void throwSys(const std::string& what) {
  throw InternalError(PERSEUS_STR(what << ": " << std::strerror(errno)));
}

SockAddr nameOf(int fd, bool peer) {
  SockAddr out;
  out.length = sizeof(out.storage);
  auto* sa = reinterpret_cast<sockaddr*>(&out.storage);
  int rc = peer ? ::getpeername(fd, sa, &out.length) : ::getsockname(fd, sa, &out.length);
  if (rc != 0) throwSys(peer ? "getpeername" : "getsockname");
  return out;
}

}  // namespace

SockAddr localAddress(int fd) { return nameOf(fd, false); }
SockAddr peerAddress(int fd) { return nameOf(fd, true); }

void setNonBlocking(int fd) {
  int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) throwSys("fcntl(O_NONBLOCK)");
}

void tuneDataSocket(int fd, int buffer_bytes) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  if (buffer_bytes > 0) {
    // Best effort: the kernel caps these at net.core.[rw]mem_max.
    ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buffer_bytes, sizeof(buffer_bytes));
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buffer_bytes, sizeof(buffer_bytes));
  }
}

Fd listenOn(const SockAddr& addr, int backlog) {
  Fd fd(::socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) throwSys("socket");
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  // With SO_REUSEADDR, Linux lets bind() share a port with a socket that is not listening
  // (an outgoing connection's local port) and reports the clash only at listen(). Both mean
  // "this port is taken", which a caller scanning a port range skips.
  const bool bound = ::bind(fd.get(), addr.get(), addr.length) == 0;
  const bool listening = bound && ::listen(fd.get(), backlog) == 0;
  if (!bound || (!listening && errno == EADDRINUSE)) {
    throw InvalidArgumentError(PERSEUS_STR("cannot listen on "
                                           << addr.str() << ": " << std::strerror(errno)
                                           << "; check PERSEUS_IFACE and the port"));
  }
  if (!listening) throwSys("listen on " + addr.str());
  return fd;
}

Fd startConnect(const SockAddr& addr) {
  Fd fd(::socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) throwSys("socket");
  if (::connect(fd.get(), addr.get(), addr.length) != 0 && errno != EINPROGRESS) {
    // Report through finishConnect so that callers have one failure path.
    int err = errno;
    ::shutdown(fd.get(), SHUT_RDWR);
    errno = err;
  }
  return fd;
}

int finishConnect(int fd) {
  int err = 0;
  socklen_t len = sizeof(err);
  if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) return errno;
  if (err != 0) return err;
  sockaddr_storage ss;
  socklen_t sl = sizeof(ss);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &sl) != 0) return ENOTCONN;
  return 0;
}

int pollTimeoutMs(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  if (left.count() <= 0) return 0;
  return left.count() > INT_MAX ? INT_MAX : static_cast<int>(left.count()) + 1;
}

Fd connectOnce(const SockAddr& addr, Clock::time_point deadline, int* error) {
  Fd fd = startConnect(addr);
  pollfd p{fd.get(), POLLOUT, 0};
  *error = 0;
  if (::poll(&p, 1, pollTimeoutMs(deadline)) > 0) {
    *error = finishConnect(fd.get());
    if (*error == 0) return fd;
  }
  return Fd();
}

Fd connectWithRetry(const SockAddr& addr, Clock::time_point deadline, const std::string& what) {
  auto backoff = std::chrono::milliseconds(5);
  int last_error = 0;
  while (true) {
    int error = 0;
    Fd fd = connectOnce(addr, deadline, &error);
    if (fd.valid()) return fd;
    if (error != 0) last_error = error;
    if (Clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - Clock::now()));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
  }
  throw TimeoutError(PERSEUS_STR("cannot connect to "
                                 << what << " at " << addr.str() << (last_error ? ": " : "")
                                 << (last_error ? std::strerror(last_error) : "")
                                 << "; is it running and reachable (firewall, PERSEUS_IFACE)?"));
}

namespace {

[[noreturn]] void throwLost(int peer_rank, const std::string& what, const char* cause) {
  throw PeerLostError(peer_rank, PERSEUS_STR("connection to " << what << " lost: " << cause));
}

}  // namespace

void writeAll(int fd, const void* data, size_t bytes, Clock::time_point deadline, int peer_rank,
              const std::string& what) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (bytes > 0) {
    ssize_t n = ::send(fd, p, bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
      throwLost(peer_rank, what, std::strerror(errno));
    pollfd pfd{fd, POLLOUT, 0};
    if (::poll(&pfd, 1, pollTimeoutMs(deadline)) == 0 && Clock::now() >= deadline) {
      throw TimeoutError(PERSEUS_STR("sending to " << what << " timed out"));
    }
  }
}

void readAll(int fd, void* data, size_t bytes, Clock::time_point deadline, int peer_rank,
             const std::string& what) {
  auto* p = static_cast<uint8_t*>(data);
  while (bytes > 0) {
    ssize_t n = ::recv(fd, p, bytes, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0) throwLost(peer_rank, what, "closed by the peer");
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) throwLost(peer_rank, what, std::strerror(errno));
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, pollTimeoutMs(deadline)) == 0 && Clock::now() >= deadline) {
      throw TimeoutError(PERSEUS_STR("receiving from " << what << " timed out"));
    }
  }
}

}  // namespace perseus::transport::tcp
