// Fuzzes the launcher-facing text decoders: host:port parsing of published data-plane addresses
// (numeric only, as a fuzzer must not resolve names) and hex secrets.
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"
#include "transport/tcp/auth.h"
#include "transport/tcp/socket.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace t = perseus::transport::tcp;
  std::string text(reinterpret_cast<const char*>(data), size);
  try {
    t::Secret s = t::Secret::fromHex(text, "fuzz");
    if (s.hex().size() != text.size()) __builtin_trap();
  } catch (const perseus::InvalidArgumentError&) {
  }
  bool numeric = text.find_first_not_of("0123456789.:[]abcdefABCDEF") == std::string::npos;
  if (numeric) {
    try {
      t::SockAddr a = t::SockAddr::parse(text, "fuzz");
      (void)a.str();
    } catch (const perseus::InvalidArgumentError&) {
    }
  }
  return 0;
}
