// Thin helpers over POSIX sockets shared by the TCP channel, the auth handshake and the store:
// an owning fd, IPv4/IPv6 addresses as text, and the socket options Perseus always sets.
// Every function throws (never returns an error code), naming the address involved.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <string>

namespace perseus::transport::tcp {

using Clock = std::chrono::steady_clock;

// Owns one file descriptor; closes it on destruction. Movable, not copyable.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

struct SockAddr {
  sockaddr_storage storage{};
  socklen_t length = 0;

  // "host:port", "[v6]:port" or a host and a port. Host names are resolved (IPv4 first).
  // Throws InvalidArgumentError naming `what` (the variable or role) on failure.
  static SockAddr parse(const std::string& host, int port, const std::string& what);
  static SockAddr parse(const std::string& host_port, const std::string& what);
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage); }
  int family() const { return storage.ss_family; }
  int port() const;
  void setPort(int port);
  std::string host() const;  // numeric
  std::string str() const;   // host:port, [v6]:port
  bool isLoopback() const;
};

SockAddr localAddress(int fd);
SockAddr peerAddress(int fd);

// A listening socket on `addr` (port 0 = any), non-blocking, with SO_REUSEADDR.
Fd listenOn(const SockAddr& addr, int backlog = 1024);
// Starts a non-blocking connect; completion is signalled by writability (see finishConnect).
Fd startConnect(const SockAddr& addr);
// Returns 0 when the connection is established, or the errno of the failure.
int finishConnect(int fd);
// One connection attempt until `deadline`: the connected socket, or an invalid Fd with *error
// set to the errno of the failure (0: the deadline passed first).
Fd connectOnce(const SockAddr& addr, Clock::time_point deadline, int* error);
// Connects with retries (the listener may not be up yet) until `deadline`. Throws TimeoutError
// naming `what` and the address.
Fd connectWithRetry(const SockAddr& addr, Clock::time_point deadline, const std::string& what);

void setNonBlocking(int fd);
// TCP_NODELAY, keep-alive, and socket buffers of `buffer_bytes` each way (0 = kernel default).
void tuneDataSocket(int fd, int buffer_bytes);

// Writes/reads all of `bytes` on a non-blocking fd, polling until `deadline`. Throws
// TimeoutError, or PeerLostError(peer_rank) on EOF/reset; `what` names the peer in messages.
void writeAll(int fd, const void* data, size_t bytes, Clock::time_point deadline, int peer_rank,
              const std::string& what);
void readAll(int fd, void* data, size_t bytes, Clock::time_point deadline, int peer_rank,
             const std::string& what);

// Milliseconds until `deadline` for poll(), clamped to [0, INT_MAX].
int pollTimeoutMs(Clock::time_point deadline);

}  // namespace perseus::transport::tcp
