#include "transport/tcp/auth.h"

#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/status.h"

namespace perseus::transport::tcp {
namespace {

constexpr uint8_t kMagic[4] = {'P', 'R', 'S', '1'};
constexpr uint8_t kAccept = 0x01;

int hexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

Digest transcriptMac(const Secret& secret, char label, const std::vector<uint8_t>& hello_bytes,
                     const uint8_t* server_nonce) {
  HmacSha256 mac(secret.bytes().data(), secret.bytes().size());
  mac.update(&label, 1);
  mac.update(hello_bytes.data(), hello_bytes.size());
  mac.update(server_nonce, kNonceBytes);
  return mac.finish();
}

}  // namespace

void fillRandom(void* data, size_t bytes) {
  auto* p = static_cast<uint8_t*>(data);
  while (bytes > 0) {
    ssize_t n = ::getrandom(p, bytes, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw InternalError(PERSEUS_STR("getrandom failed: " << std::strerror(errno)));
    }
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

Secret Secret::fromHex(const std::string& hex, const std::string& what) {
  if (hex.empty() || hex.size() % 2 != 0) {
    throw InvalidArgumentError(
        PERSEUS_STR(what << " must be a non-empty hex string of even length (perseusrun sets it)"));
  }
  Secret s;
  s.bytes_.resize(hex.size() / 2);
  for (size_t i = 0; i < s.bytes_.size(); ++i) {
    int hi = hexValue(hex[2 * i]), lo = hexValue(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      throw InvalidArgumentError(
          PERSEUS_STR(what << " is not hex (bad character at offset " << 2 * i << ")"));
    }
    s.bytes_[i] = static_cast<uint8_t>(hi * 16 + lo);
  }
  return s;
}

Secret Secret::random(size_t bytes) {
  Secret s;
  s.bytes_.resize(bytes);
  fillRandom(s.bytes_.data(), bytes);
  return s;
}

std::string Secret::hex() const { return toHex(bytes_.data(), bytes_.size()); }

Secret Secret::derive(const std::string& label) const {
  const std::string text = "perseus/derive/" + label;
  Digest d = hmacSha256(bytes_.data(), bytes_.size(), text.data(), text.size());
  Secret s;
  s.bytes_.assign(d.begin(), d.end());
  return s;
}

std::vector<uint8_t> encodeHello(const Hello& hello) {
  PERSEUS_CHECK(hello.meta.size() <= kMaxMetaBytes, "hello meta too large");
  std::vector<uint8_t> out(kMagic, kMagic + 4);
  out.push_back(static_cast<uint8_t>(hello.purpose));
  out.push_back(static_cast<uint8_t>(hello.meta.size() >> 8));
  out.push_back(static_cast<uint8_t>(hello.meta.size()));
  out.insert(out.end(), hello.nonce, hello.nonce + kNonceBytes);
  out.insert(out.end(), hello.meta.begin(), hello.meta.end());
  return out;
}

Decode decodeHello(const uint8_t* data, size_t bytes, Hello* out, size_t* needed,
                   std::string* error) {
  if (bytes == 0) {
    *needed = kHelloHeaderBytes;
    return Decode::kNeedMore;
  }
  // Check the magic on whatever prefix has arrived, so garbage fails on its first bytes.
  if (std::memcmp(data, kMagic, std::min<size_t>(bytes, 4)) != 0) {
    *error = "bad magic (not a Perseus peer, or a different version)";
    return Decode::kBad;
  }
  if (bytes >= 5 && data[4] != static_cast<uint8_t>(Purpose::kStore) &&
      data[4] != static_cast<uint8_t>(Purpose::kData)) {
    *error = "unknown purpose " + std::to_string(data[4]);
    return Decode::kBad;
  }
  if (bytes < kHelloHeaderBytes) {
    *needed = kHelloHeaderBytes;
    return Decode::kNeedMore;
  }
  size_t meta_len = (size_t{data[5]} << 8) | data[6];
  if (meta_len > kMaxMetaBytes) {
    *error =
        "meta length " + std::to_string(meta_len) + " exceeds " + std::to_string(kMaxMetaBytes);
    return Decode::kBad;
  }
  if (bytes < kHelloHeaderBytes + meta_len) {
    *needed = kHelloHeaderBytes + meta_len;
    return Decode::kNeedMore;
  }
  out->purpose = static_cast<Purpose>(data[4]);
  std::memcpy(out->nonce, data + 7, kNonceBytes);
  out->meta.assign(data + kHelloHeaderBytes, data + kHelloHeaderBytes + meta_len);
  *needed = kHelloHeaderBytes + meta_len;
  return Decode::kOk;
}

size_t AuthResponder::wanted() const {
  if (state_ == State::kHello) {
    if (in_.size() < kHelloHeaderBytes) return kHelloHeaderBytes - in_.size();
    size_t meta_len = (size_t{in_[5]} << 8) | in_[6];
    return kHelloHeaderBytes + meta_len - in_.size();
  }
  if (state_ == State::kProof) return kProofBytes - in_.size();
  return 0;
}

void AuthResponder::fail(const std::string& why) {
  state_ = State::kFailed;
  error_ = why;
}

void AuthResponder::feed(const uint8_t* data, size_t bytes) {
  if (state_ == State::kDone || state_ == State::kFailed) return;
  PERSEUS_CHECK(bytes <= wanted(), "fed more bytes than the handshake step wants");
  in_.insert(in_.end(), data, data + bytes);
  if (state_ == State::kHello) {
    size_t needed = 0;
    std::string error;
    Decode d = decodeHello(in_.data(), in_.size(), &hello_, &needed, &error);
    if (d == Decode::kBad) return fail(error);
    if (d == Decode::kNeedMore) return;
    hello_bytes_.swap(in_);
    in_.clear();
    fillRandom(server_nonce_, kNonceBytes);
    Digest mac = transcriptMac(secret_, 'S', hello_bytes_, server_nonce_);
    outbox_.insert(outbox_.end(), server_nonce_, server_nonce_ + kNonceBytes);
    outbox_.insert(outbox_.end(), mac.begin(), mac.end());
    state_ = State::kProof;
    return;
  }
  if (in_.size() < kProofBytes) return;
  Digest expected = transcriptMac(secret_, 'C', hello_bytes_, server_nonce_);
  if (!constantTimeEqual(expected.data(), in_.data(), kProofBytes)) {
    return fail("wrong proof (the peer does not know the job secret PERSEUS_SECRET)");
  }
  outbox_.push_back(kAccept);
  state_ = State::kDone;
}

void authenticateAsClient(int fd, const Secret& secret, Purpose purpose,
                          const std::vector<uint8_t>& meta, Clock::time_point deadline,
                          const std::string& what) {
  Hello hello;
  hello.purpose = purpose;
  hello.meta = meta;
  fillRandom(hello.nonce, kNonceBytes);
  std::vector<uint8_t> hello_bytes = encodeHello(hello);
  writeAll(fd, hello_bytes.data(), hello_bytes.size(), deadline, -1, what);
  uint8_t challenge[kChallengeBytes];
  try {
    readAll(fd, challenge, sizeof(challenge), deadline, -1, what);
  } catch (const PeerLostError&) {
    throw AuthError(PERSEUS_STR(what << " closed the connection during authentication; "
                                        "is it a Perseus endpoint of this job?"));
  }
  Digest expected = transcriptMac(secret, 'S', hello_bytes, challenge);
  if (!constantTimeEqual(expected.data(), challenge + kNonceBytes, 32)) {
    throw AuthError(PERSEUS_STR(what << " failed to prove it knows the job secret; check that "
                                        "PERSEUS_SECRET matches the launcher's"));
  }
  Digest proof = transcriptMac(secret, 'C', hello_bytes, challenge);
  writeAll(fd, proof.data(), proof.size(), deadline, -1, what);
  uint8_t accept = 0;
  try {
    readAll(fd, &accept, 1, deadline, -1, what);
  } catch (const PeerLostError&) {
    throw AuthError(PERSEUS_STR(what << " refused our proof; check that PERSEUS_SECRET matches "
                                        "the launcher's"));
  }
  if (accept != kAccept) throw AuthError(PERSEUS_STR(what << " sent a bad accept byte"));
}

Hello authenticateAsServer(int fd, const Secret& secret, Clock::time_point deadline,
                           const std::string& what) {
  AuthResponder responder(secret);
  uint8_t buf[kHelloHeaderBytes + kMaxMetaBytes];
  while (responder.state() != AuthResponder::State::kDone) {
    if (responder.state() == AuthResponder::State::kFailed) {
      throw AuthError(PERSEUS_STR("handshake with " << what << " failed: " << responder.error()));
    }
    size_t n = responder.wanted();
    readAll(fd, buf, n, deadline, -1, what);
    responder.feed(buf, n);
    auto& out = responder.outbox();
    if (!out.empty()) {
      writeAll(fd, out.data(), out.size(), deadline, -1, what);
      out.clear();
    }
  }
  return responder.hello();
}

}  // namespace perseus::transport::tcp
