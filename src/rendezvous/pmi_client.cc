#include "rendezvous/pmi_client.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>

#include "common/status.h"

namespace perseus::rendezvous {
namespace {

std::map<std::string, std::string> parseLine(const std::string& line) {
  std::map<std::string, std::string> fields;
  std::istringstream in(line);
  std::string word;
  while (in >> word) {
    const size_t eq = word.find('=');
    if (eq != std::string::npos) fields[word.substr(0, eq)] = word.substr(eq + 1);
  }
  return fields;
}

}  // namespace

PmiClient::PmiClient(int fd, std::chrono::milliseconds timeout)
    : fd_(fd), deadline_(std::chrono::steady_clock::now() + timeout) {
  call("cmd=init pmi_version=1 pmi_subversion=1\n", "response_to_init");
  kvs_ = call("cmd=get_my_kvsname\n", "my_kvsname")["kvsname"];
  if (kvs_.empty()) throw InternalError("the PMI server (PMI_FD) named no key-value space");
}

std::map<std::string, std::string> PmiClient::call(const std::string& request,
                                                   const std::string& reply) {
  const std::string what = "the MPI launcher's PMI server (PMI_FD=" + std::to_string(fd_) + ")";
  size_t sent = 0;
  while (sent < request.size()) {
    ssize_t n = ::write(fd_, request.data() + sent, request.size() - sent);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      throw InternalError(PERSEUS_STR("cannot write to "
                                      << what << ": " << std::strerror(errno)
                                      << "; was this process started by mpiexec?"));
    }
    sent += static_cast<size_t>(n);
  }
  while (true) {
    const size_t newline = pending_.find('\n');
    if (newline != std::string::npos) {
      std::string line = pending_.substr(0, newline);
      pending_.erase(0, newline + 1);
      auto fields = parseLine(line);
      if (fields["cmd"] != reply) {
        throw InternalError(PERSEUS_STR(what << " answered '" << line << "' to '"
                                             << request.substr(0, request.size() - 1) << "'"));
      }
      auto rc = fields.find("rc");
      if (rc != fields.end() && rc->second != "0") {
        throw InternalError(PERSEUS_STR(what << " failed '" << request.substr(0, request.size() - 1)
                                             << "': " << line));
      }
      return fields;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline_ - std::chrono::steady_clock::now());
    pollfd p{fd_, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(0, left.count())));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      throw TimeoutError(PERSEUS_STR(what
                                     << " did not answer '" << request.substr(0, request.size() - 1)
                                     << "' within PERSEUS_START_TIMEOUT; did every rank start?"));
    }
    char buf[4096];
    ssize_t n = ::read(fd_, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      throw InternalError(PERSEUS_STR(what
                                      << " closed the connection"
                                      << (n < 0 ? std::string(": ") + std::strerror(errno) : "")));
    }
    pending_.append(buf, static_cast<size_t>(n));
  }
}

void PmiClient::put(const std::string& key, const std::string& value) {
  call("cmd=put kvsname=" + kvs_ + " key=" + key + " value=" + value + "\n", "put_result");
}

std::string PmiClient::get(const std::string& key) {
  return call("cmd=get kvsname=" + kvs_ + " key=" + key + "\n", "get_result")["value"];
}

void PmiClient::barrier() { call("cmd=barrier_in\n", "barrier_out"); }

void PmiClient::finalize() { call("cmd=finalize\n", "finalize_ack"); }

}  // namespace perseus::rendezvous
