#include "rendezvous/tcp_store_server.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <unordered_map>

#include "common/log_rate_limit.h"
#include "common/logging.h"
#include "common/status.h"
#include "rendezvous/store_protocol.h"
#include "transport/tcp/incoming_handshake.h"

namespace perseus::rendezvous {

using transport::tcp::Clock;
using transport::tcp::Fd;
using transport::tcp::IncomingHandshake;
namespace proto = protocol;

// All state of the server; touched only by the server thread.
class TcpStoreServer::Loop {
 public:
  Loop(Fd listener, int wake_fd, const transport::tcp::Secret& secret, Options options,
       const std::atomic<bool>& stopping)
      : listener_(std::move(listener)),
        wake_fd_(wake_fd),
        secret_(secret),
        options_(options),
        stopping_(stopping) {}

  ~Loop() {
    if (drop_log_.suppressed() > 0) {
      PERSEUS_LOG(WARNING, kRendezvous)
          << "store: " << drop_log_.suppressed() << " more dropped connections were not logged";
    }
  }

  void run();

 private:
  struct Client {
    std::unique_ptr<IncomingHandshake> handshake;  // null once authenticated
    Fd fd;
    std::string peer;
    std::vector<uint8_t> in, out;
    size_t out_sent = 0;
  };
  struct Waiter {
    uint64_t client;
    Clock::time_point deadline;
  };

  void acceptAll();
  void serve(uint64_t id, Client& c, short revents);
  bool readFrames(uint64_t id, Client& c);  // false: close the client
  void handle(uint64_t id, Client& c, const proto::Request& request);
  void respond(uint64_t id, const proto::Response& response);
  void wakeWaiters(const std::string& key);
  void expireWaiters(Clock::time_point now);
  void drop(uint64_t id, const std::string& why);

  Fd listener_;
  int wake_fd_;
  transport::tcp::Secret secret_;
  Options options_;
  const std::atomic<bool>& stopping_;
  uint64_t next_id_ = 1;
  std::map<uint64_t, Client> clients_;
  std::unordered_map<std::string, std::vector<uint8_t>> data_;
  std::unordered_multimap<std::string, Waiter> waiters_;
  // A port scan or a job with another secret knocks many times: a few lines, then a count.
  LogRateLimit drop_log_{3, std::chrono::seconds(60)};
};

void TcpStoreServer::Loop::run() {
  while (!stopping_.load()) {
    std::vector<pollfd> fds{{listener_.get(), POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    std::vector<uint64_t> ids;
    Clock::time_point next = Clock::now() + std::chrono::seconds(1);
    for (auto& [id, c] : clients_) {
      short events = POLLIN;
      if (c.handshake) {
        events = c.handshake->pollEvents();
        next = std::min(next, c.handshake->deadline());
      } else if (!c.out.empty()) {
        events |= POLLOUT;
      }
      fds.push_back({c.handshake ? c.handshake->fd() : c.fd.get(), events, 0});
      ids.push_back(id);
    }
    for (auto& [key, w] : waiters_) next = std::min(next, w.deadline);
    ::poll(fds.data(), fds.size(), transport::tcp::pollTimeoutMs(next));
    if (fds[0].revents & POLLIN) acceptAll();
    for (size_t i = 0; i < ids.size(); ++i) {
      auto it = clients_.find(ids[i]);
      if (it != clients_.end()) serve(ids[i], it->second, fds[i + 2].revents);
    }
    expireWaiters(Clock::now());
  }
}

void TcpStoreServer::Loop::acceptAll() {
  while (true) {
    Fd fd(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!fd.valid()) return;
    Client c;
    c.handshake = std::make_unique<IncomingHandshake>(std::move(fd), secret_,
                                                      Clock::now() + options_.handshake_timeout);
    c.peer = c.handshake->peer();
    clients_.emplace(next_id_++, std::move(c));
  }
}

void TcpStoreServer::Loop::serve(uint64_t id, Client& c, short revents) {
  if (c.handshake) {
    auto state = c.handshake->step();
    if (state == IncomingHandshake::State::kFailed) {
      return drop(id, "authentication failed: " + c.handshake->error());
    }
    if (state == IncomingHandshake::State::kPending) {
      if (c.handshake->expired(Clock::now())) drop(id, "handshake deadline passed");
      return;
    }
    if (c.handshake->hello().purpose != transport::tcp::Purpose::kStore) {
      return drop(id, "authenticated, but not a store client");
    }
    c.fd = c.handshake->takeFd();
    c.handshake.reset();
    PERSEUS_LOG(DEBUG, kRendezvous) << "store: client " << c.peer << " authenticated";
    return;
  }
  if (revents & (POLLIN | POLLHUP | POLLERR)) {
    if (!readFrames(id, c)) return;
  }
  while (!c.out.empty()) {
    ssize_t n = ::send(c.fd.get(), c.out.data() + c.out_sent, c.out.size() - c.out_sent,
                       MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
      return drop(id, std::string("send failed: ") + std::strerror(errno));
    }
    c.out_sent += static_cast<size_t>(n);
    if (c.out_sent < c.out.size()) return;
    c.out.clear();
    c.out_sent = 0;
  }
}

bool TcpStoreServer::Loop::readFrames(uint64_t id, Client& c) {
  uint8_t buf[64 << 10];
  ssize_t n = ::recv(c.fd.get(), buf, sizeof(buf), MSG_DONTWAIT);
  if (n == 0) {
    drop(id, std::string());  // a client that is done; not worth a warning
    return false;
  }
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return true;
    drop(id, std::string("recv failed: ") + std::strerror(errno));
    return false;
  }
  c.in.insert(c.in.end(), buf, buf + n);
  size_t offset = 0;
  while (true) {
    proto::Request request;
    size_t consumed = 0;
    std::string error;
    auto r = proto::decodeRequest(c.in.data() + offset, c.in.size() - offset, &request, &consumed,
                                  &error);
    if (r == proto::DecodeResult::kNeedMore) break;
    if (r == proto::DecodeResult::kBad) {
      drop(id, "malformed request: " + error);
      return false;
    }
    offset += consumed;
    handle(id, c, request);
  }
  c.in.erase(c.in.begin(), c.in.begin() + static_cast<long>(offset));
  return true;
}

void TcpStoreServer::Loop::handle(uint64_t id, Client& c, const proto::Request& request) {
  proto::Response response;
  auto it = data_.find(request.key);
  switch (request.op) {
    case proto::Op::kSet:
      data_[request.key] = request.value;
      wakeWaiters(request.key);
      break;
    case proto::Op::kCheck:
      if (it == data_.end())
        response.status = proto::Status::kMissing;
      else
        response.payload = it->second;
      break;
    case proto::Op::kGet:
      if (it != data_.end()) {
        response.payload = it->second;
        break;
      }
      waiters_.emplace(request.key,
                       Waiter{id, Clock::now() + std::chrono::milliseconds(request.timeout_ms)});
      return;  // answered by wakeWaiters or expireWaiters
    case proto::Op::kAdd: {
      int64_t value = 0;
      if (it != data_.end()) {
        if (it->second.size() != 8) {
          response.status = proto::Status::kBadRequest;
          break;
        }
        value = proto::decodeInt64(it->second);
      }
      // Wrap like the two's-complement counter it is, rather than overflow (UB).
      value =
          static_cast<int64_t>(static_cast<uint64_t>(value) + static_cast<uint64_t>(request.delta));
      data_[request.key] = proto::encodeInt64(value);
      response.payload = proto::encodeInt64(value);
      wakeWaiters(request.key);
      break;
    }
  }
  respond(id, response);
}

void TcpStoreServer::Loop::respond(uint64_t id, const proto::Response& response) {
  auto it = clients_.find(id);
  if (it != clients_.end()) proto::encodeResponse(response, &it->second.out);
}

void TcpStoreServer::Loop::wakeWaiters(const std::string& key) {
  auto range = waiters_.equal_range(key);
  if (range.first == range.second) return;
  proto::Response response;
  response.payload = data_[key];
  std::vector<uint64_t> ids;
  for (auto it = range.first; it != range.second; ++it) ids.push_back(it->second.client);
  waiters_.erase(key);
  for (uint64_t id : ids) respond(id, response);
}

void TcpStoreServer::Loop::expireWaiters(Clock::time_point now) {
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (it->second.deadline > now) {
      ++it;
      continue;
    }
    proto::Response response;
    response.status = proto::Status::kTimeout;
    respond(it->second.client, response);
    it = waiters_.erase(it);
  }
}

void TcpStoreServer::Loop::drop(uint64_t id, const std::string& why) {
  auto it = clients_.find(id);
  if (it == clients_.end()) return;
  std::string note;
  if (!why.empty() && drop_log_.allow(Clock::now(), &note)) {
    PERSEUS_LOG(WARNING, kRendezvous)
        << "store: dropped connection from " << it->second.peer << ": " << why << note;
  }
  for (auto w = waiters_.begin(); w != waiters_.end();) {
    w = (w->second.client == id) ? waiters_.erase(w) : std::next(w);
  }
  clients_.erase(it);
}

std::unique_ptr<TcpStoreServer> TcpStoreServer::start(const std::string& bind_host, int port,
                                                      const std::string& secret_hex,
                                                      Options options) {
  auto secret = transport::tcp::Secret::fromHex(secret_hex, "store secret");
  std::unique_ptr<TcpStoreServer> server(new TcpStoreServer());
  Fd listener = transport::tcp::listenOn(
      transport::tcp::SockAddr::parse(bind_host, port, "store server bind address"));
  server->address_ = transport::tcp::localAddress(listener.get());
  server->wake_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!server->wake_.valid()) {
    throw InternalError(PERSEUS_STR("eventfd: " << std::strerror(errno)));
  }
  server->loop_ = std::make_unique<Loop>(std::move(listener), server->wake_.get(), secret, options,
                                         server->stopping_);
  server->thread_ = std::thread([loop = server->loop_.get()] {
    try {
      loop->run();
    } catch (const std::exception& e) {
      PERSEUS_LOG(ERROR, kRendezvous) << "store server stopped: " << e.what();
    }
  });
  return server;
}

void TcpStoreServer::stop() {
  if (stopping_.exchange(true)) return;
  uint64_t one = 1;
  if (::write(wake_.get(), &one, sizeof(one)) < 0) {
    // The loop also wakes at least once a second, so a failed write only delays the stop.
  }
  if (thread_.joinable()) thread_.join();
  loop_.reset();
}

TcpStoreServer::~TcpStoreServer() { stop(); }

}  // namespace perseus::rendezvous
