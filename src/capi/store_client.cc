// perseus_store_client_*: the rendezvous store's client for launchers and elastic workers (the
// perseusrun driver publishes memberships with it; a worker reads its assignment). Each handle
// owns one TcpStoreClient, whose mutex serialises callers.
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "capi/runtime.h"
#include "rendezvous/tcp_store_client.h"

using perseus::capi::guarded;
using perseus::rendezvous::TcpStoreClient;

namespace {

std::chrono::milliseconds toMs(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
}

TcpStoreClient* clientOf(void* client, const char* key) {
  if (client == nullptr || key == nullptr) {
    throw perseus::InvalidArgumentError("perseus_store_client_*: client and key must not be NULL");
  }
  return static_cast<TcpStoreClient*>(client);
}

}  // namespace

extern "C" {

perseus_status perseus_store_client_connect(const char* host, int32_t port, const char* secret,
                                            double timeout_s, void** client) {
  return guarded([&] {
    if (host == nullptr || secret == nullptr || client == nullptr) {
      throw perseus::InvalidArgumentError(
          "perseus_store_client_connect: host, secret and client must not be NULL");
    }
    *client = new TcpStoreClient(host, port, secret, toMs(timeout_s));
  });
}

perseus_status perseus_store_client_set(void* client, const char* key, const void* value,
                                        int64_t bytes) {
  return guarded([&] {
    auto* c = clientOf(client, key);
    if (bytes < 0 || (bytes > 0 && value == nullptr)) {
      throw perseus::InvalidArgumentError("perseus_store_client_set: bad value");
    }
    const auto* p = static_cast<const uint8_t*>(value);
    c->set(key, std::vector<uint8_t>(p, p + bytes));
  });
}

perseus_status perseus_store_client_get(void* client, const char* key, double timeout_s,
                                        int32_t* found, void** value, int64_t* bytes) {
  return guarded([&] {
    auto* c = clientOf(client, key);
    if (found == nullptr || value == nullptr || bytes == nullptr) {
      throw perseus::InvalidArgumentError("perseus_store_client_get: NULL output");
    }
    std::vector<uint8_t> v;
    *found = 0;
    *value = nullptr;
    *bytes = 0;
    if (timeout_s < 0) {
      if (!c->check(key, &v)) return;
    } else {
      v = c->get(key, toMs(timeout_s));
    }
    *found = 1;
    *value = std::malloc(v.empty() ? 1 : v.size());
    if (*value == nullptr) throw perseus::InternalError("perseus_store_client_get: out of memory");
    if (!v.empty()) std::memcpy(*value, v.data(), v.size());
    *bytes = static_cast<int64_t>(v.size());
  });
}

perseus_status perseus_store_client_add(void* client, const char* key, int64_t delta,
                                        int64_t* result) {
  return guarded([&] {
    auto* c = clientOf(client, key);
    const int64_t sum = c->add(key, delta);
    if (result != nullptr) *result = sum;
  });
}

void perseus_store_free(void* value) { std::free(value); }

perseus_status perseus_store_client_close(void* client) {
  return guarded([&] {
    if (client == nullptr) throw perseus::InvalidArgumentError("perseus_store_client_close: NULL");
    delete static_cast<TcpStoreClient*>(client);
  });
}

}  // extern "C"
