#include "rendezvous/tcp_store_client.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "common/status.h"

namespace perseus::rendezvous {

using transport::tcp::Clock;
namespace proto = protocol;

namespace {
// How long a reply may lag behind the timeout the server was asked to apply.
constexpr auto kReplyGrace = std::chrono::seconds(10);
constexpr auto kRequestTimeout = std::chrono::seconds(60);
}  // namespace

TcpStoreClient::TcpStoreClient(const std::string& host, int port, const std::string& secret_hex,
                               std::chrono::milliseconds connect_timeout) {
  auto secret = transport::tcp::Secret::fromHex(secret_hex, "PERSEUS_SECRET");
  auto addr = transport::tcp::SockAddr::parse(host, port, "PERSEUS_CONTROLLER_ADDR/_PORT");
  what_ = "rendezvous store at " + addr.str();
  auto deadline = Clock::now() + connect_timeout;
  fd_ = transport::tcp::connectWithRetry(addr, deadline, what_);
  transport::tcp::authenticateAsClient(fd_.get(), secret, transport::tcp::Purpose::kStore, {},
                                       deadline, what_);
}

std::unique_ptr<TcpStoreClient> TcpStoreClient::tryConnect(
    const std::string& host, int port, const std::string& secret_hex,
    std::chrono::milliseconds connect_timeout, std::chrono::milliseconds handshake_timeout) {
  auto secret = transport::tcp::Secret::fromHex(secret_hex, "PERSEUS_SECRET");
  auto addr = transport::tcp::SockAddr::parse(host, port, "PERSEUS_CONTROLLER_ADDR/_PORT");
  int error = 0;
  transport::tcp::Fd fd = transport::tcp::connectOnce(addr, Clock::now() + connect_timeout, &error);
  if (!fd.valid()) return nullptr;
  std::string what = "rendezvous store at " + addr.str();
  transport::tcp::authenticateAsClient(fd.get(), secret, transport::tcp::Purpose::kStore, {},
                                       Clock::now() + handshake_timeout, what);
  return std::unique_ptr<TcpStoreClient>(new TcpStoreClient(std::move(fd), std::move(what)));
}

proto::Response TcpStoreClient::call(const proto::Request& request,
                                     std::chrono::milliseconds wait) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!fd_.valid()) {
    throw PeerLostError(-1, what_ + ": connection was closed by an earlier failure");
  }
  auto deadline = Clock::now() + wait;
  try {
    std::vector<uint8_t> frame;
    proto::encodeRequest(request, &frame);
    transport::tcp::writeAll(fd_.get(), frame.data(), frame.size(), deadline, -1, what_);
    while (true) {
      proto::Response response;
      size_t consumed = 0;
      std::string error;
      auto r = proto::decodeResponse(in_.data(), in_.size(), &response, &consumed, &error);
      if (r == proto::DecodeResult::kBad)
        throw PeerLostError(-1, what_ + " sent garbage: " + error);
      if (r == proto::DecodeResult::kOk) {
        in_.erase(in_.begin(), in_.begin() + static_cast<long>(consumed));
        return response;
      }
      uint8_t buf[64 << 10];
      ssize_t n = ::recv(fd_.get(), buf, sizeof(buf), MSG_DONTWAIT);
      if (n > 0) {
        in_.insert(in_.end(), buf, buf + n);
        continue;
      }
      if (n == 0) throw PeerLostError(-1, what_ + " closed the connection; did the launcher exit?");
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        throw PeerLostError(-1, what_ + ": " + std::strerror(errno));
      }
      pollfd p{fd_.get(), POLLIN, 0};
      if (::poll(&p, 1, transport::tcp::pollTimeoutMs(deadline)) == 0 && Clock::now() >= deadline) {
        throw TimeoutError(PERSEUS_STR(what_ << " did not answer for key '" << request.key << "'"));
      }
    }
  } catch (...) {
    // The stream position is unknown now; a later call must not read this call's reply.
    fd_.reset();
    throw;
  }
}

void TcpStoreClient::set(const std::string& key, const std::vector<uint8_t>& value) {
  if (value.size() > proto::kMaxValueBytes) {
    throw InvalidArgumentError(PERSEUS_STR("store value for '" << key << "' has " << value.size()
                                                               << " bytes; the limit is "
                                                               << proto::kMaxValueBytes));
  }
  proto::Request r;
  r.op = proto::Op::kSet;
  r.key = key;
  r.value = value;
  call(r, kRequestTimeout);
}

std::vector<uint8_t> TcpStoreClient::get(const std::string& key,
                                         std::chrono::milliseconds timeout) {
  proto::Request r;
  r.op = proto::Op::kGet;
  r.key = key;
  auto ms = std::max<int64_t>(0, std::min<int64_t>(timeout.count(), UINT32_MAX));
  r.timeout_ms = static_cast<uint32_t>(ms);
  proto::Response response = call(r, std::chrono::milliseconds(ms) + kReplyGrace);
  if (response.status == proto::Status::kTimeout) {
    throw TimeoutError(PERSEUS_STR("key '" << key << "' did not appear in the " << what_
                                           << " within " << timeout.count() << " ms"));
  }
  return response.payload;
}

bool TcpStoreClient::check(const std::string& key, std::vector<uint8_t>* value) {
  proto::Request r;
  r.op = proto::Op::kCheck;
  r.key = key;
  proto::Response response = call(r, kRequestTimeout);
  if (response.status != proto::Status::kOk) return false;
  if (value != nullptr) *value = std::move(response.payload);
  return true;
}

int64_t TcpStoreClient::add(const std::string& key, int64_t delta) {
  proto::Request r;
  r.op = proto::Op::kAdd;
  r.key = key;
  r.delta = delta;
  proto::Response response = call(r, kRequestTimeout);
  if (response.status != proto::Status::kOk) {
    throw InvalidArgumentError(
        PERSEUS_STR("store key '" << key << "' holds a value that is not a counter"));
  }
  return proto::decodeInt64(response.payload);
}

}  // namespace perseus::rendezvous
