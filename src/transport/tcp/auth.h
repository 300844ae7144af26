// Mutual authentication of every TCP connection (data plane and store) with the job secret.
//
// Note [Connection handshake]
// Both ends know the job secret K (PERSEUS_SECRET, hex). The connecting side (C) and the
// accepting side (S) exchange, in this order, big-endian:
//   C->S hello:     "PRS1" | purpose u8 | meta_len u16 | client_nonce[32] | meta[meta_len]
//   S->C challenge: server_nonce[32] | HMAC(K, "S" | hello | server_nonce)
//   C->S proof:     HMAC(K, "C" | hello | server_nonce)
//   S->C accept:    0x01
// Each side proves it knows K over a nonce chosen by the other, so a recorded exchange cannot
// be replayed (S's fresh nonce) or reflected (the "S"/"C" labels and C's nonce). The meta bytes
// (who is connecting, for which stream) are covered by both MACs. meta_len is bounded by
// kMaxMetaBytes before anything is allocated; a bad magic, purpose or MAC ends the exchange.
// C sends nothing after the proof until it has read the accept byte, and S reads exactly the
// bytes each step needs, so no application byte is ever consumed by the handshake.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "transport/tcp/sha256.h"
#include "transport/tcp/socket.h"

namespace perseus::transport::tcp {

// The job secret as bytes. Parsed from hex; an empty secret is refused.
class Secret {
 public:
  Secret() = default;
  static Secret fromHex(const std::string& hex, const std::string& what);  // InvalidArgumentError
  static Secret random(size_t bytes = 32);
  std::string hex() const;
  // HMAC(this, "perseus/derive/" + label): a key that only holders of this secret can compute,
  // and that differs per label (each elastic membership gets its own data-plane key).
  Secret derive(const std::string& label) const;
  const std::vector<uint8_t>& bytes() const { return bytes_; }
  bool empty() const { return bytes_.empty(); }

 private:
  std::vector<uint8_t> bytes_;
};

void fillRandom(void* data, size_t bytes);

enum class Purpose : uint8_t { kStore = 1, kData = 2 };

constexpr size_t kNonceBytes = 32;
constexpr size_t kMaxMetaBytes = 1024;
constexpr size_t kHelloHeaderBytes = 4 + 1 + 2 + kNonceBytes;
constexpr size_t kChallengeBytes = kNonceBytes + 32;
constexpr size_t kProofBytes = 32;

struct Hello {
  Purpose purpose = Purpose::kStore;
  uint8_t nonce[kNonceBytes] = {};
  std::vector<uint8_t> meta;
};

std::vector<uint8_t> encodeHello(const Hello& hello);

enum class Decode { kNeedMore, kOk, kBad };
// Pure decoder of a hello at the start of `data` (fuzzed in tests/fuzz). On kNeedMore, *needed
// is the total bytes required so far; on kBad, *error says why.
Decode decodeHello(const uint8_t* data, size_t bytes, Hello* out, size_t* needed,
                   std::string* error);

// Server side of the handshake, driven by the caller's poll loop. It never blocks: the caller
// reads exactly wanted() bytes into feed() and writes out what outbox() holds.
class AuthResponder {
 public:
  enum class State { kHello, kProof, kDone, kFailed };
  explicit AuthResponder(const Secret& secret) : secret_(secret) {}

  size_t wanted() const;  // further bytes to read before the next step can run
  void feed(const uint8_t* data, size_t bytes);
  std::vector<uint8_t>& outbox() { return outbox_; }
  const std::vector<uint8_t>& outbox() const { return outbox_; }
  State state() const { return state_; }
  const std::string& error() const { return error_; }
  const Hello& hello() const { return hello_; }

 private:
  void fail(const std::string& why);

  Secret secret_;
  State state_ = State::kHello;
  std::vector<uint8_t> in_;
  std::vector<uint8_t> hello_bytes_;
  Hello hello_;
  uint8_t server_nonce_[kNonceBytes] = {};
  std::vector<uint8_t> outbox_;
  std::string error_;
};

// Client side, blocking until `deadline`: runs the whole exchange on a connected socket.
// Throws AuthError if the server does not prove knowledge of the secret or refuses ours,
// TimeoutError at the deadline. `what` names the server in messages.
void authenticateAsClient(int fd, const Secret& secret, Purpose purpose,
                          const std::vector<uint8_t>& meta, Clock::time_point deadline,
                          const std::string& what);

// Server side, blocking until `deadline` (for code that accepts one connection at a time);
// returns the verified hello. Throws AuthError or TimeoutError.
Hello authenticateAsServer(int fd, const Secret& secret, Clock::time_point deadline,
                           const std::string& what);

}  // namespace perseus::transport::tcp
