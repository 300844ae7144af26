// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), self-contained so that authentication needs
// no crypto library at build or run time. Used only to authenticate connections (auth.h); the
// data plane itself is not encrypted.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace perseus::transport::tcp {

using Digest = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t bytes);
  Digest finish();  // the object must not be updated afterwards

 private:
  void block(const uint8_t* p);

  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buffered_ = 0;
  uint64_t total_ = 0;
};

Digest sha256(const void* data, size_t bytes);

// Incremental HMAC so that a transcript of several pieces needs no concatenation.
class HmacSha256 {
 public:
  HmacSha256(const void* key, size_t key_bytes);
  void update(const void* data, size_t bytes) { inner_.update(data, bytes); }
  Digest finish();

 private:
  Sha256 inner_;
  uint8_t outer_pad_[64];
};

Digest hmacSha256(const void* key, size_t key_bytes, const void* data, size_t bytes);

// Compares without an early exit, so the time taken reveals nothing about where they differ.
bool constantTimeEqual(const uint8_t* a, const uint8_t* b, size_t bytes);

std::string toHex(const uint8_t* data, size_t bytes);

}  // namespace perseus::transport::tcp
