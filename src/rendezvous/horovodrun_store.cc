#include "rendezvous/horovodrun_store.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <thread>

#include "common/logging.h"
#include "common/status.h"
#include "transport/tcp/iface.h"
#include "transport/tcp/socket.h"

// Note [horovodrun rendezvous]
// horovodrun 0.28 in Gloo mode starts an HTTP key-value server (RendezvousServer in
// horovod/runner/http/http_server.py) and gives every worker its address as
// HOROVOD_GLOO_RENDEZVOUS_ADDR/PORT, with its place in HOROVOD_RANK/SIZE/LOCAL_*/CROSS_*.
// The server keeps values by scope and key: PUT /<scope>/<key> stores the body, GET answers
// 200 with it or 404 while it is absent, DELETE in a scope the server did not define removes
// the key. Horovod's Gloo context uses the scopes "global", "local_<host>" and "cross_<n>";
// Perseus uses a scope of its own ("perseus"), so that the server's bookkeeping of those is
// untouched. Rank 0 opens a Perseus store with a fresh secret and PUTs "host,port,secret"
// under a key named after the launch (a second init() in the same process uses another key);
// the other ranks poll GET until it appears and connect; once every rank has reached the
// store, rank 0 DELETEs the key. The HTTP server has no authentication (neither has Horovod's
// Gloo): whoever reaches it during start-up can read the secret, so a job that needs more
// uses perseusrun, whose store hands the secret to the ranks through their environment.

namespace perseus::rendezvous {
namespace {

using transport::tcp::Clock;

constexpr std::chrono::seconds kRequestTimeout{10};
const char* const kScope = "perseus";

// Keys are one path segment: the server splits the path at '/'.
std::string keyFor(const std::string& launch_id) {
  std::string key = "store.";
  for (char c : launch_id) {
    key.push_back(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' ? c : '_');
  }
  return key;
}

// Everything the server sends until it closes the connection (HTTP/1.0).
std::string readToEnd(int fd, Clock::time_point deadline, const std::string& what) {
  std::string out;
  char buf[4096];
  while (true) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0) {
      out.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n == 0) return out;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      throw PeerLostError(-1, what + ": " + std::strerror(errno));
    }
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, transport::tcp::pollTimeoutMs(deadline)) == 0) {
      throw PeerLostError(-1, what + " sent no complete answer within " +
                                  std::to_string(kRequestTimeout.count()) + " s");
    }
  }
}

}  // namespace

int HorovodKvClient::request(const std::string& verb, const std::string& path,
                             const std::string& payload, std::string* body) {
  const std::string what = "horovodrun's rendezvous server at " + where();
  const auto deadline = Clock::now() + kRequestTimeout;
  auto addr = transport::tcp::SockAddr::parse(host_, port_, "HOROVOD_GLOO_RENDEZVOUS_ADDR/_PORT");
  int error = 0;
  transport::tcp::Fd fd = transport::tcp::connectOnce(addr, deadline, &error);
  if (!fd.valid()) {
    throw PeerLostError(-1, PERSEUS_STR(what << " cannot be reached ("
                                             << (error ? std::strerror(error) : "no answer")
                                             << "); did horovodrun exit?"));
  }
  std::ostringstream head;
  head << verb << " " << path << " HTTP/1.0\r\nHost: " << where()
       << "\r\nContent-Length: " << payload.size() << "\r\n\r\n";
  const std::string message = head.str() + payload;
  transport::tcp::writeAll(fd.get(), message.data(), message.size(), deadline, -1, what);
  const std::string reply = readToEnd(fd.get(), deadline, what);
  int status = 0;
  if (std::sscanf(reply.c_str(), "HTTP/%*d.%*d %d", &status) != 1) {
    throw PeerLostError(-1, what + " answered " + verb + " " + path +
                                " with something other than HTTP: '" + reply.substr(0, 80) + "'");
  }
  const size_t end_of_head = reply.find("\r\n\r\n");
  if (body != nullptr)
    body->assign(end_of_head == std::string::npos ? std::string() : reply.substr(end_of_head + 4));
  return status;
}

void HorovodKvClient::put(const std::string& scope, const std::string& key,
                          const std::string& value) {
  const int status = request("PUT", "/" + scope + "/" + key, value, nullptr);
  if (status != 200) {
    throw PeerLostError(-1, PERSEUS_STR("horovodrun's rendezvous server at "
                                        << where() << " refused to store " << scope << "/" << key
                                        << " (HTTP " << status << ")"));
  }
}

bool HorovodKvClient::get(const std::string& scope, const std::string& key, std::string* value) {
  const int status = request("GET", "/" + scope + "/" + key, std::string(), value);
  if (status == 404) return false;
  if (status != 200) {
    throw PeerLostError(-1, PERSEUS_STR("horovodrun's rendezvous server at "
                                        << where() << " answered GET " << scope << "/" << key
                                        << " with HTTP " << status));
  }
  return true;
}

void HorovodKvClient::erase(const std::string& scope, const std::string& key) {
  request("DELETE", "/" + scope + "/" + key, std::string(), nullptr);
}

StoreConnection horovodrunStore(const LaunchInfo& info, const Params& params) {
  auto kv = std::make_shared<HorovodKvClient>(info.store_host, info.http_port);
  const std::string key = keyFor(info.launch_id);
  const Topology& t = info.topology;
  if (t.rank == 0) {
    const bool all_local = info.has_local && t.local_size == t.size;
    const std::string host =
        transport::tcp::chooseListenHost(params.iface, info.store_host, info.http_port, all_local);
    int port = static_cast<int>(params.port);
    StoreConnection out = startLocalServer(host, params, &port);
    kv->put(kScope, key, publishedStore(host, port, out.secret_hex));
    out.after_rendezvous = [kv, key] {
      try {
        kv->erase(kScope, key);
      } catch (const Error& e) {  // the job formed; the key is only left behind
        PERSEUS_LOG(WARNING, kRendezvous) << "could not remove the store's address: " << e.what();
      }
    };
    return out;
  }
  const auto deadline =
      Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(params.start_timeout_s * 1000));
  auto pause = std::chrono::milliseconds(5);
  std::string value;
  while (!kv->get(kScope, key, &value)) {
    if (Clock::now() >= deadline) {
      throw TimeoutError(PERSEUS_STR(
          "rank " << t.rank << " (horovodrun): rank 0 did not publish the rendezvous store at "
                  << kv->where() << " within PERSEUS_START_TIMEOUT=" << params.start_timeout_s
                  << " s; did rank 0 start, and does it run Perseus too?"));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(100));
  }
  return connectPublished(value, "horovodrun's rendezvous server", params);
}

}  // namespace perseus::rendezvous
