#include "transport/tcp/tcp_mesh.h"

#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <exception>
#include <set>
#include <sstream>
#include <thread>

#include "common/logging.h"
#include "common/status.h"
#include "transport/tcp/incoming_handshake.h"

namespace perseus::transport::tcp {
namespace {

// Meta of a data-plane hello, big-endian: from u32 | to u32 | index u16 | count u16 | stripe u32.
struct DataMeta {
  uint32_t from = 0, to = 0;
  uint16_t index = 0, count = 0;
  uint32_t stripe = 0;
};
constexpr size_t kDataMetaBytes = 16;
constexpr auto kHandshakeTimeout = std::chrono::seconds(10);

void put(std::vector<uint8_t>* out, uint64_t value, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) out->push_back(static_cast<uint8_t>(value >> (8 * i)));
}
uint64_t get(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v = (v << 8) | p[i];
  return v;
}

std::vector<uint8_t> encodeMeta(const DataMeta& m) {
  std::vector<uint8_t> out;
  put(&out, m.from, 4);
  put(&out, m.to, 4);
  put(&out, m.index, 2);
  put(&out, m.count, 2);
  put(&out, m.stripe, 4);
  return out;
}

bool decodeMeta(const std::vector<uint8_t>& in, DataMeta* m) {
  if (in.size() != kDataMetaBytes) return false;
  m->from = static_cast<uint32_t>(get(in.data(), 4));
  m->to = static_cast<uint32_t>(get(in.data() + 4, 4));
  m->index = static_cast<uint16_t>(get(in.data() + 8, 2));
  m->count = static_cast<uint16_t>(get(in.data() + 10, 2));
  m->stripe = static_cast<uint32_t>(get(in.data() + 12, 4));
  return true;
}

std::string rankList(const std::set<int>& ranks) {
  std::ostringstream os;
  for (int r : ranks) os << (os.tellp() > 0 ? ", " : "") << r;
  return os.str();
}

// Sockets arriving from one lower rank, slotted by stripe index.
struct Arrivals {
  std::vector<Fd> sockets;
  size_t stripe = 0;
  size_t filled = 0;
};

// The acceptor's progress: the lower ranks still expected, and the sockets each has opened.
struct AcceptState {
  int rank = 0;
  std::set<int> expected;
  std::map<int, Arrivals> done;
  std::map<int, Arrivals> partial;
};

// Slots the socket of a completed handshake by its stripe index; returns why the connection
// is refused, or "".
std::string admit(IncomingHandshake& h, AcceptState* s) {
  DataMeta m;
  if (h.hello().purpose != Purpose::kData || !decodeMeta(h.hello().meta, &m)) {
    return "not a data-plane connection";
  }
  const int from = static_cast<int>(m.from);
  if (static_cast<int>(m.to) != s->rank || s->expected.count(from) == 0) {
    return PERSEUS_STR("unexpected connection from rank " << m.from << " for rank " << m.to);
  }
  if (m.count == 0 || m.index >= m.count || m.stripe == 0) return "bad stripe description";
  Arrivals& a = s->partial[from];
  if (a.sockets.empty()) {
    a.sockets.resize(m.count);
    a.stripe = m.stripe;
  }
  if (a.sockets.size() != m.count || a.stripe != m.stripe || a.sockets[m.index].valid()) {
    return PERSEUS_STR("inconsistent or duplicate connection " << m.index << " from rank "
                                                               << m.from);
  }
  a.sockets[m.index] = h.takeFd();
  if (++a.filled == a.sockets.size()) {
    s->done[from] = std::move(a);
    s->partial.erase(from);
    s->expected.erase(from);
  }
  return "";
}

// Accepts every connection waiting on the listener; each starts its handshake.
void acceptWaiting(int listen_fd, const Secret& secret, Clock::time_point deadline,
                   std::vector<std::unique_ptr<IncomingHandshake>>* pending) {
  while (true) {
    Fd fd(::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC));
    if (!fd.valid()) return;
    // A silent or slow connection gets a bounded share of the start-up time.
    auto handshake_deadline = std::min(deadline, Clock::now() + kHandshakeTimeout);
    pending->push_back(
        std::make_unique<IncomingHandshake>(std::move(fd), secret, handshake_deadline));
  }
}

// Steps every pending handshake: admits the completed ones, drops (with a warning) the
// refused, failed and expired ones.
void stepHandshakes(std::vector<std::unique_ptr<IncomingHandshake>>* pending, AcceptState* s) {
  for (size_t i = 0; i < pending->size();) {
    IncomingHandshake& h = *(*pending)[i];
    auto state = h.step();
    std::string error = h.error();
    if (state == IncomingHandshake::State::kDone) {
      std::string refused = admit(h, s);
      if (!refused.empty()) error = refused;
    }
    if (state == IncomingHandshake::State::kPending && !h.expired(Clock::now())) {
      ++i;
      continue;
    }
    if (!error.empty() || state == IncomingHandshake::State::kPending) {
      PERSEUS_LOG(WARNING, kRendezvous)
          << "rank " << s->rank << ": dropped data-plane connection from " << h.peer() << ": "
          << (error.empty() ? "handshake deadline passed" : error);
    }
    pending->erase(pending->begin() + static_cast<long>(i));
  }
}

// Runs on the acceptor thread until every rank in `expected` has connected all its sockets.
std::map<int, Arrivals> acceptPeers(int rank, int listen_fd, std::set<int> expected,
                                    const Secret& secret, Clock::time_point deadline,
                                    const std::atomic<bool>& stop) {
  AcceptState s;
  s.rank = rank;
  s.expected = std::move(expected);
  std::vector<std::unique_ptr<IncomingHandshake>> pending;
  while (!s.expected.empty()) {
    if (stop.load()) return std::move(s.done);
    if (Clock::now() >= deadline) {
      throw TimeoutError(PERSEUS_STR("rank "
                                     << rank << ": ranks " << rankList(s.expected)
                                     << " did not open their TCP connections in time; check "
                                        "that those processes are alive and can reach this "
                                        "host (PERSEUS_IFACE, firewall)"));
    }
    std::vector<pollfd> fds{{listen_fd, POLLIN, 0}};
    for (auto& h : pending) fds.push_back({h->fd(), h->pollEvents(), 0});
    ::poll(fds.data(), fds.size(), 50);
    if (fds[0].revents & POLLIN) acceptWaiting(listen_fd, secret, deadline, &pending);
    stepHandshakes(&pending, &s);
  }
  return std::move(s.done);
}

}  // namespace

TcpListener::TcpListener(const std::string& host, int port_lo, int port_hi) {
  if (port_lo == 0) {
    fd_ = listenOn(SockAddr::parse(host, 0, "data-plane listener (PERSEUS_IFACE)"));
  } else {
    for (int port = port_lo; port <= port_hi && !fd_.valid(); ++port) {
      try {
        fd_ = listenOn(SockAddr::parse(host, port, "data-plane listener (PERSEUS_IFACE)"));
      } catch (const InvalidArgumentError&) {
        if (port == port_hi) {
          throw InvalidArgumentError(
              PERSEUS_STR("no free port for the data plane on "
                          << host << " in PERSEUS_PORT_RANGE=" << port_lo << "-" << port_hi
                          << "; widen the range (each rank takes one port)"));
        }
      }
    }
  }
  address_ = localAddress(fd_.get());
}

std::map<int, std::unique_ptr<TcpChannel>> connectTcpPeers(int rank, TcpListener& listener,
                                                           const std::map<int, SockAddr>& peers,
                                                           const Secret& secret,
                                                           const MeshOptions& options) {
  PERSEUS_CHECK(options.connections >= 1 && options.connections <= 64,
                "PERSEUS_TCP_CONNECTIONS must be 1..64, got " << options.connections);
  std::set<int> lower;
  for (const auto& [peer, addr] : peers) {
    if (peer < rank) lower.insert(peer);
  }
  std::atomic<bool> stop{false};
  std::map<int, Arrivals> accepted;
  std::exception_ptr accept_error;
  std::thread acceptor([&] {
    try {
      accepted = acceptPeers(rank, listener.fd(), lower, secret, options.deadline, stop);
    } catch (...) {
      accept_error = std::current_exception();
    }
  });
  std::map<int, std::unique_ptr<TcpChannel>> channels;
  try {
    for (const auto& [peer, addr] : peers) {
      if (peer < rank) continue;
      std::vector<Fd> sockets;
      std::string what = PERSEUS_STR("rank " << peer << " (" << addr.str() << ")");
      for (int i = 0; i < options.connections; ++i) {
        Fd fd = connectWithRetry(addr, options.deadline, what);
        DataMeta m{static_cast<uint32_t>(rank), static_cast<uint32_t>(peer),
                   static_cast<uint16_t>(i), static_cast<uint16_t>(options.connections),
                   static_cast<uint32_t>(options.stripe_bytes)};
        authenticateAsClient(fd.get(), secret, Purpose::kData, encodeMeta(m), options.deadline,
                             what);
        sockets.push_back(std::move(fd));
      }
      channels[peer] = std::make_unique<TcpChannel>(peer, std::move(sockets), options.stripe_bytes);
    }
  } catch (...) {
    stop.store(true);
    acceptor.join();
    throw;
  }
  acceptor.join();
  if (accept_error) std::rethrow_exception(accept_error);
  for (auto& [peer, arrivals] : accepted) {
    channels[peer] =
        std::make_unique<TcpChannel>(peer, std::move(arrivals.sockets), arrivals.stripe);
  }
  return channels;
}

}  // namespace perseus::transport::tcp
