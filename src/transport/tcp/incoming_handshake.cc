#include "transport/tcp/incoming_handshake.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "common/status.h"

namespace perseus::transport::tcp {

IncomingHandshake::IncomingHandshake(Fd fd, const Secret& secret, Clock::time_point deadline)
    : fd_(std::move(fd)), responder_(secret), deadline_(deadline) {
  setNonBlocking(fd_.get());
  try {
    peer_ = peerAddress(fd_.get()).str();
  } catch (const std::exception&) {
    peer_ = "(unknown address)";
  }
}

IncomingHandshake::State IncomingHandshake::fail(const std::string& why) {
  error_ = why;
  return State::kFailed;
}

IncomingHandshake::State IncomingHandshake::step() {
  while (true) {
    auto& out = responder_.outbox();
    if (!out.empty()) {
      ssize_t n = ::send(fd_.get(), out.data() + out_sent_, out.size() - out_sent_,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return State::kPending;
        return fail(PERSEUS_STR("send failed: " << std::strerror(errno)));
      }
      out_sent_ += static_cast<size_t>(n);
      if (out_sent_ < out.size()) return State::kPending;
      out.clear();
      out_sent_ = 0;
    }
    switch (responder_.state()) {
      case AuthResponder::State::kDone:
        return State::kDone;
      case AuthResponder::State::kFailed:
        return fail(responder_.error());
      default:
        break;
    }
    uint8_t buf[kHelloHeaderBytes + kMaxMetaBytes];
    size_t want = responder_.wanted();
    ssize_t n = ::recv(fd_.get(), buf, want, MSG_DONTWAIT);
    if (n == 0) {
      // Before our proof was sent the peer cannot know our secret: it gave up (a timeout, a
      // port probe). After it, a different secret and giving up look the same from here.
      return fail(responder_.state() == AuthResponder::State::kHello
                      ? "closed the connection before finishing its hello (it gave up waiting, "
                        "or was not a Perseus rank)"
                      : "closed the connection after our proof without sending its own (a peer "
                        "with a different PERSEUS_SECRET does this, and so does one that gave "
                        "up waiting)");
    }
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return State::kPending;
      return fail(PERSEUS_STR("recv failed: " << std::strerror(errno)));
    }
    responder_.feed(buf, static_cast<size_t>(n));
  }
}

}  // namespace perseus::transport::tcp
