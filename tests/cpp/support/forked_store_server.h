// A TcpStoreServer in its own forked process, for tests that fork rank processes: forking while
// an in-process server thread holds a lock (malloc's, the sanitizers' allocator's, the logger's)
// can leave a child deadlocked on that lock. Create it while the test is still single-threaded.
#pragma once

#include <sys/types.h>

#include <string>

namespace perseus::testing {

class ForkedStoreServer {
 public:
  // Serves on `host`, any free port, with the job secret `secret_hex`. Throws on failure.
  explicit ForkedStoreServer(const std::string& secret_hex, const std::string& host = "127.0.0.1");
  ~ForkedStoreServer();  // kills the server process
  ForkedStoreServer(const ForkedStoreServer&) = delete;
  ForkedStoreServer& operator=(const ForkedStoreServer&) = delete;

  int port() const { return port_; }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
};

}  // namespace perseus::testing
