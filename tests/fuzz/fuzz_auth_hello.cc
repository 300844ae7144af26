// Fuzzes the accepting side of Note [Connection handshake]: the hello decoder and the
// responder state machine fed in the step sizes a server would read.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "transport/tcp/auth.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace t = perseus::transport::tcp;
  t::Hello hello;
  size_t needed = 0;
  std::string error;
  auto r = t::decodeHello(data, size, &hello, &needed, &error);
  if (r == t::Decode::kNeedMore && needed <= size) __builtin_trap();
  if (r == t::Decode::kOk && hello.meta.size() > t::kMaxMetaBytes) __builtin_trap();

  static const t::Secret secret = t::Secret::fromHex("00112233445566778899aabbccddeeff", "fuzz");
  t::AuthResponder responder(secret);
  size_t offset = 0;
  while (offset < size && responder.state() != t::AuthResponder::State::kDone &&
         responder.state() != t::AuthResponder::State::kFailed) {
    size_t want = std::min(responder.wanted(), size - offset);
    if (want == 0) __builtin_trap();
    responder.feed(data + offset, want);
    responder.outbox().clear();
    offset += want;
  }
  // Without the secret, random bytes must never complete the handshake.
  if (responder.state() == t::AuthResponder::State::kDone) __builtin_trap();
  return 0;
}
