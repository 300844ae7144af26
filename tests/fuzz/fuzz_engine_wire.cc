// Fuzzes the negotiation message decoders (src/negotiation/wire.h): the request lists that ranks
// send their coordinator and the response lists it sends back. They arrive only over
// authenticated connections, but a corrupt message must still be an error, never a crash or
// an allocation sized by a length field. A decoded list re-encodes to the same bytes.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/status.h"
#include "negotiation/wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace e = perseus::engine;
  const std::vector<uint8_t> bytes(data, data + size);
  try {
    auto requests = e::decodeRequests(bytes);
    if (e::encodeRequests(requests) != bytes) __builtin_trap();
  } catch (const perseus::Error&) {
  }
  try {
    auto responses = e::decodeResponses(bytes);
    (void)e::encodeResponses(responses);
  } catch (const perseus::Error&) {
  }
  return 0;
}
