// Fuzzes the store server's request decoder (Note [Store frames]) with a stream of frames.
#include <cstddef>
#include <cstdint>
#include <string>

#include "rendezvous/store_protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace p = perseus::rendezvous::protocol;
  size_t offset = 0;
  while (offset < size) {
    p::Request request;
    size_t consumed = 0;
    std::string error;
    auto r = p::decodeRequest(data + offset, size - offset, &request, &consumed, &error);
    if (r != p::DecodeResult::kOk) break;
    if (consumed == 0 || consumed > size - offset) __builtin_trap();
    // A decoded request re-encodes to the same bytes.
    std::vector<uint8_t> again;
    p::encodeRequest(request, &again);
    if (again.size() != consumed || !std::equal(again.begin(), again.end(), data + offset)) {
      __builtin_trap();
    }
    offset += consumed;
  }
  return 0;
}
