// Fuzzes the store client's response decoder (Note [Store frames]).
#include <cstddef>
#include <cstdint>
#include <string>

#include "rendezvous/store_protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace p = perseus::rendezvous::protocol;
  size_t offset = 0;
  while (offset < size) {
    p::Response response;
    size_t consumed = 0;
    std::string error;
    if (p::decodeResponse(data + offset, size - offset, &response, &consumed, &error) !=
        p::DecodeResult::kOk) {
      break;
    }
    if (consumed == 0 || consumed > size - offset) __builtin_trap();
    offset += consumed;
  }
  return 0;
}
