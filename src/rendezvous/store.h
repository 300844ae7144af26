// Key-value store used once at start-up (and when process sets are created) to exchange
// addresses. Like c10d's Store it is separate from the data plane.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace perseus::rendezvous {

class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const std::vector<uint8_t>& value) = 0;
  // Blocks until the key exists; throws TimeoutError naming the key after `timeout`.
  virtual std::vector<uint8_t> get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // Atomically adds `delta` and returns the new value (a missing key counts as 0).
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
};

}  // namespace perseus::rendezvous
