#include "rendezvous/store_protocol.h"

#include "common/status.h"

namespace perseus::rendezvous::protocol {
namespace {

uint64_t readBe(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v = (v << 8) | p[i];
  return v;
}

void writeBe(std::vector<uint8_t>* out, uint64_t value, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) out->push_back(static_cast<uint8_t>(value >> (8 * i)));
}

// Checks the length prefix; on kOk, *body/*body_len delimit the body.
DecodeResult frame(const uint8_t* data, size_t bytes, const uint8_t** body, size_t* body_len,
                   size_t* consumed, std::string* error) {
  if (bytes < 4) return DecodeResult::kNeedMore;
  size_t len = readBe(data, 4);
  if (len == 0 || len > kMaxFrameBytes) {
    *error =
        "frame length " + std::to_string(len) + " is outside 1.." + std::to_string(kMaxFrameBytes);
    return DecodeResult::kBad;
  }
  if (bytes - 4 < len) return DecodeResult::kNeedMore;
  *body = data + 4;
  *body_len = len;
  *consumed = 4 + len;
  return DecodeResult::kOk;
}

size_t beginFrame(std::vector<uint8_t>* out) {
  size_t at = out->size();
  out->resize(at + 4);
  return at;
}

void endFrame(std::vector<uint8_t>* out, size_t at) {
  size_t len = out->size() - at - 4;
  PERSEUS_CHECK(len <= kMaxFrameBytes, "store frame of " << len << " bytes is too large");
  for (int i = 0; i < 4; ++i) (*out)[at + i] = static_cast<uint8_t>(len >> (24 - 8 * i));
}

}  // namespace

DecodeResult decodeRequest(const uint8_t* data, size_t bytes, Request* out, size_t* consumed,
                           std::string* error) {
  const uint8_t* body = nullptr;
  size_t len = 0;
  DecodeResult r = frame(data, bytes, &body, &len, consumed, error);
  if (r != DecodeResult::kOk) return r;
  auto bad = [&](const std::string& why) {
    *error = why;
    return DecodeResult::kBad;
  };
  if (len < 3) return bad("request shorter than its header");
  uint8_t op = body[0];
  size_t key_len = readBe(body + 1, 2);
  if (key_len > kMaxKeyBytes || 3 + key_len > len) return bad("bad key length");
  const uint8_t* operand = body + 3 + key_len;
  size_t rest = len - 3 - key_len;
  out->key.assign(reinterpret_cast<const char*>(body + 3), key_len);
  out->value.clear();
  switch (static_cast<Op>(op)) {
    case Op::kSet: {
      if (rest < 4) return bad("set without a value length");
      size_t value_len = readBe(operand, 4);
      if (value_len != rest - 4 || value_len > kMaxValueBytes) return bad("bad value length");
      out->value.assign(operand + 4, operand + 4 + value_len);
      break;
    }
    case Op::kGet:
      if (rest != 4) return bad("get needs exactly a timeout");
      out->timeout_ms = static_cast<uint32_t>(readBe(operand, 4));
      break;
    case Op::kAdd:
      if (rest != 8) return bad("add needs exactly an 8-byte delta");
      out->delta = static_cast<int64_t>(readBe(operand, 8));
      break;
    case Op::kCheck:
      if (rest != 0) return bad("check takes no operand");
      break;
    default:
      return bad("unknown op " + std::to_string(op));
  }
  out->op = static_cast<Op>(op);
  return DecodeResult::kOk;
}

DecodeResult decodeResponse(const uint8_t* data, size_t bytes, Response* out, size_t* consumed,
                            std::string* error) {
  const uint8_t* body = nullptr;
  size_t len = 0;
  DecodeResult r = frame(data, bytes, &body, &len, consumed, error);
  if (r != DecodeResult::kOk) return r;
  if (body[0] > static_cast<uint8_t>(Status::kBadRequest)) {
    *error = "unknown status " + std::to_string(body[0]);
    return DecodeResult::kBad;
  }
  out->status = static_cast<Status>(body[0]);
  out->payload.assign(body + 1, body + len);
  return DecodeResult::kOk;
}

void encodeRequest(const Request& request, std::vector<uint8_t>* out) {
  PERSEUS_CHECK(request.key.size() <= kMaxKeyBytes, "store key too long: " << request.key.size());
  size_t at = beginFrame(out);
  out->push_back(static_cast<uint8_t>(request.op));
  writeBe(out, request.key.size(), 2);
  out->insert(out->end(), request.key.begin(), request.key.end());
  switch (request.op) {
    case Op::kSet:
      writeBe(out, request.value.size(), 4);
      out->insert(out->end(), request.value.begin(), request.value.end());
      break;
    case Op::kGet:
      writeBe(out, request.timeout_ms, 4);
      break;
    case Op::kAdd:
      writeBe(out, static_cast<uint64_t>(request.delta), 8);
      break;
    case Op::kCheck:
      break;
  }
  endFrame(out, at);
}

void encodeResponse(const Response& response, std::vector<uint8_t>* out) {
  size_t at = beginFrame(out);
  out->push_back(static_cast<uint8_t>(response.status));
  out->insert(out->end(), response.payload.begin(), response.payload.end());
  endFrame(out, at);
}

std::vector<uint8_t> encodeInt64(int64_t value) {
  std::vector<uint8_t> out;
  writeBe(&out, static_cast<uint64_t>(value), 8);
  return out;
}

int64_t decodeInt64(const std::vector<uint8_t>& bytes) {
  if (bytes.size() != 8) {
    throw MismatchError(PERSEUS_STR("store counter holds "
                                    << bytes.size()
                                    << " bytes, not an 8-byte integer; a key used with add() "
                                       "was also set() to something else"));
  }
  return static_cast<int64_t>(readBe(bytes.data(), 8));
}

}  // namespace perseus::rendezvous::protocol
