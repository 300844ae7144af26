#include "support/forked_store_server.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <stdexcept>

#include "rendezvous/tcp_store_server.h"

namespace perseus::testing {

ForkedStoreServer::ForkedStoreServer(const std::string& secret_hex, const std::string& host) {
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
  std::fflush(nullptr);
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    ::close(fds[0]);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the test
    int port = -1;
    std::unique_ptr<rendezvous::TcpStoreServer> server;
    try {
      server = rendezvous::TcpStoreServer::start(host, 0, secret_hex);
      port = server->port();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "forked store server: %s\n", e.what());
    }
    (void)!::write(fds[1], &port, sizeof(port));
    ::close(fds[1]);
    while (true) ::pause();
  }
  ::close(fds[1]);
  int port = -1;
  ssize_t n = ::read(fds[0], &port, sizeof(port));
  ::close(fds[0]);
  if (n != sizeof(port) || port <= 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    throw std::runtime_error("the forked store server did not start");
  }
  port_ = port;
}

ForkedStoreServer::~ForkedStoreServer() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

}  // namespace perseus::testing
