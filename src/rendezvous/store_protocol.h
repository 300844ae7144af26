// Wire format of the TCP store (after the handshake of Note [Connection handshake]).
//
// Note [Store frames]
// Every frame is  body_len u32 | body[body_len], big-endian. A request body is
//   op u8 | key_len u16 | key[key_len] | operand
// with operand, by op:
//   kSet  value_len u32 | value[value_len]   (value_len == body remainder, checked)
//   kGet  timeout_ms u32                     (server answers kTimeout when it expires)
//   kAdd  delta i64
//   kCheck (none)                            (kOk with value if present, kMissing if not)
// A response body is  status u8 | payload: the value (kGet/kCheck), the new i64 (kAdd), empty
// otherwise. body_len is checked against kMaxFrameBytes and keys against kMaxKeyBytes before
// anything is allocated; a frame that fails to decode closes the connection.
// The decoders are pure functions over a byte buffer, fuzzed in tests/fuzz/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace perseus::rendezvous::protocol {

constexpr size_t kMaxKeyBytes = 4096;
constexpr size_t kMaxValueBytes = size_t{64} << 20;
constexpr size_t kMaxFrameBytes = kMaxValueBytes + kMaxKeyBytes + 16;

enum class Op : uint8_t { kSet = 1, kGet = 2, kAdd = 3, kCheck = 4 };
enum class Status : uint8_t { kOk = 0, kTimeout = 1, kMissing = 2, kBadRequest = 3 };

struct Request {
  Op op = Op::kSet;
  std::string key;
  std::vector<uint8_t> value;  // kSet
  uint32_t timeout_ms = 0;     // kGet
  int64_t delta = 0;           // kAdd
};

struct Response {
  Status status = Status::kOk;
  std::vector<uint8_t> payload;
};

enum class DecodeResult { kNeedMore, kOk, kBad };

// Decodes one frame at the start of data[0..bytes). kOk sets *consumed to the frame's size;
// kBad sets *error. Never reads past `bytes` and never allocates more than the frame holds.
DecodeResult decodeRequest(const uint8_t* data, size_t bytes, Request* out, size_t* consumed,
                           std::string* error);
DecodeResult decodeResponse(const uint8_t* data, size_t bytes, Response* out, size_t* consumed,
                            std::string* error);

void encodeRequest(const Request& request, std::vector<uint8_t>* out);     // appends
void encodeResponse(const Response& response, std::vector<uint8_t>* out);  // appends

std::vector<uint8_t> encodeInt64(int64_t value);
int64_t decodeInt64(const std::vector<uint8_t>& bytes);  // 8 bytes expected; else throws

}  // namespace perseus::rendezvous::protocol
