// Striped TCP channels between forked processes, over real loopback sockets (127.0.0.x).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>

#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/params.h"
#include "common/status.h"
#include "rendezvous/tcp_store_client.h"
#include "support/forked_ranks.h"
#include "support/forked_store_server.h"
#include "transport/channel_transport.h"
#include "transport/tcp/tcp_mesh.h"

namespace perseus::transport::tcp {
namespace {

using namespace std::chrono_literals;

const char kSecret[] = "a1b2c3d4e5f60718293a4b5c6d7e8f90";

struct MeshConfig {
  int connections;
  size_t stripe;
};

// Builds this rank's transport: every rank listens on 127.0.0.(rank+1) and publishes its
// address in the test's store.
std::unique_ptr<ChannelTransport> connectRank(int rank, int size, int store_port,
                                              const MeshConfig& config, bool intruder = false) {
  rendezvous::TcpStoreClient store("127.0.0.1", store_port, kSecret, 5000ms);
  TcpListener listener("127.0.0." + std::to_string(rank + 1));
  if (intruder) {
    // Garbage and a wrong-secret client hit the listener first; the mesh must still form.
    std::thread([addr = listener.address()] {
      Fd garbage = connectWithRetry(addr, Clock::now() + 5s, "self");
      (void)::send(garbage.get(), "garbage!garbage!garbage!garbage!garbage!garbage!", 48,
                   MSG_NOSIGNAL);
      Fd wrong = connectWithRetry(addr, Clock::now() + 5s, "self");
      try {
        authenticateAsClient(wrong.get(), Secret::fromHex("00", "x"), Purpose::kData,
                             std::vector<uint8_t>(16), Clock::now() + 5s, "self");
      } catch (const Error&) {
      }
      std::this_thread::sleep_for(200ms);
    }).detach();
  }
  std::string mine = listener.address().str();
  store.set("addr/" + std::to_string(rank), {mine.begin(), mine.end()});
  std::map<int, SockAddr> peers;
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    auto v = store.get("addr/" + std::to_string(r), 10000ms);
    peers[r] = SockAddr::parse(std::string(v.begin(), v.end()), "test");
  }
  MeshOptions options;
  options.connections = config.connections;
  options.stripe_bytes = config.stripe;
  options.deadline = Clock::now() + 10s;
  auto channels = connectTcpPeers(rank, listener, peers, Secret::fromHex(kSecret, "x"), options);
  std::vector<std::unique_ptr<Channel>> slots(size);
  for (auto& [peer, channel] : channels) {
    if (channel->sockets() != static_cast<size_t>(config.connections)) return nullptr;
    slots[peer] = std::move(channel);
  }
  Params params;
  params.timeout_s = 10;
  return std::make_unique<ChannelTransport>(rank, std::move(slots), params);
}

uint8_t pattern(int from, int to, size_t i) {
  return static_cast<uint8_t>(from * 31 + to * 7 + i * 13 + (i >> 9));
}

// Note [Epoch isolation]: each elastic epoch's data plane uses the job secret derived under the
// epoch's label; keys of two epochs refuse each other's handshake, one epoch's keys agree.
bool handshake(const Secret& server_key, const Secret& client_key) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) return false;
  Fd server(fds[0]), client(fds[1]);
  bool server_ok = false;
  std::thread t([&] {
    try {
      authenticateAsServer(server.get(), server_key, Clock::now() + 5s, "test server");
      server_ok = true;
    } catch (const Error&) {
      ::shutdown(server.get(), SHUT_RDWR);
    }
  });
  bool client_ok = false;
  try {
    authenticateAsClient(client.get(), client_key, Purpose::kData, std::vector<uint8_t>(4),
                         Clock::now() + 5s, "test client");
    client_ok = true;
  } catch (const Error&) {
    ::shutdown(client.get(), SHUT_RDWR);
  }
  t.join();
  return server_ok && client_ok;
}

TEST(SecretDerive, EpochKeysAgreeWithinAnEpochAndRefuseAcross) {
  const Secret job = Secret::fromHex(kSecret, "x");
  const Secret e1 = job.derive("data/elastic/1/"), e2 = job.derive("data/elastic/2/");
  EXPECT_EQ(e1.hex(), job.derive("data/elastic/1/").hex());
  EXPECT_NE(e1.hex(), e2.hex());
  EXPECT_NE(e1.hex(), job.hex());
  EXPECT_TRUE(handshake(e1, job.derive("data/elastic/1/")));
  EXPECT_FALSE(handshake(e2, e1));  // a rank of epoch 1 knocking on a listener of epoch 2
  EXPECT_FALSE(handshake(job, e1));
}

// Ranks of one host scan PERSEUS_PORT_RANGE from the same first port at once. With
// SO_REUSEADDR, two sockets may both bind a port while neither listens; the second to call
// listen() then fails with EADDRINUSE, and must move on to the next port like a failed bind.
TEST(TcpListenerRange, ConcurrentScansOfOneRangeEachGetAPort) {
  const int lo = TcpListener("127.0.0.1").address().port();
  constexpr int kThreads = 6;
  for (int round = 0; round < 200; ++round) {
    std::vector<std::unique_ptr<TcpListener>> got(kThreads);
    std::vector<std::string> errors(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        try {
          got[t] = std::make_unique<TcpListener>("127.0.0.1", lo, lo + 3 * kThreads);
        } catch (const Error& e) {
          errors[t] = e.what();
        }
      });
    }
    for (auto& thread : threads) thread.join();
    for (int t = 0; t < kThreads; ++t) ASSERT_EQ(errors[t], "") << "round " << round;
  }
}

class TcpChannelTest : public ::testing::TestWithParam<MeshConfig> {
 protected:
  // In its own process: forking ranks beside a server thread could deadlock them.
  void SetUp() override { server_ = std::make_unique<testing::ForkedStoreServer>(kSecret); }
  std::unique_ptr<testing::ForkedStoreServer> server_;
};

// Every pair exchanges messages of awkward sizes in both directions at once; each message is
// checked byte for byte, so a wrong chunk-to-socket mapping shows up as corruption.
TEST_P(TcpChannelTest, StripedExchangeOfOddSizesBetweenProcesses) {
  const MeshConfig config = GetParam();
  constexpr int kRanks = 3;
  const std::vector<size_t> sizes = {1,
                                     7,
                                     config.stripe - 1,
                                     config.stripe,
                                     config.stripe + 1,
                                     3 * config.stripe + 5,
                                     12345,
                                     (size_t{3} << 20) + 7};
  int port = server_->port();
  auto status = testing::runForked(
      kRanks,
      [&](int rank) {
        auto t = connectRank(rank, kRanks, port, config, /*intruder=*/rank == 1);
        if (!t) return 20;
        for (size_t bytes : sizes) {
          std::vector<std::vector<uint8_t>> out(kRanks), in(kRanks);
          std::vector<SendOp> sends;
          std::vector<RecvOp> recvs;
          for (int peer = 0; peer < kRanks; ++peer) {
            if (peer == rank) continue;
            out[peer].resize(bytes);
            in[peer].assign(bytes, 0);
            for (size_t i = 0; i < bytes; ++i) out[peer][i] = pattern(rank, peer, i);
            sends.push_back({peer, out[peer].data(), bytes});
            recvs.push_back({peer, in[peer].data(), bytes});
          }
          t->exchange(sends, recvs);
          for (int peer = 0; peer < kRanks; ++peer) {
            if (peer == rank) continue;
            for (size_t i = 0; i < bytes; ++i) {
              if (in[peer][i] != pattern(peer, rank, i)) {
                std::fprintf(stderr, "rank %d: byte %zu of %zu from %d is wrong\n", rank, i, bytes,
                             peer);
                return 21;
              }
            }
          }
        }
        // Many small messages in one direction, received with different call sizes.
        if (rank < 2) {
          int peer = 1 - rank;
          std::vector<uint8_t> stream(100000);
          for (size_t i = 0; i < stream.size(); ++i) stream[i] = pattern(0, 1, i);
          if (rank == 0) {
            for (size_t off = 0; off < stream.size(); off += 333) {
              t->send(peer, stream.data() + off, std::min<size_t>(333, stream.size() - off));
            }
          } else {
            std::vector<uint8_t> got(stream.size());
            for (size_t off = 0; off < got.size(); off += 4096) {
              t->recv(peer, got.data() + off, std::min<size_t>(4096, got.size() - off));
            }
            if (got != stream) return 22;
          }
        }
        return 0;
      },
      60000ms);
  for (int r = 0; r < kRanks; ++r)
    EXPECT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r].describe();
}

INSTANTIATE_TEST_SUITE_P(Configs, TcpChannelTest,
                         ::testing::Values(MeshConfig{1, kDefaultStripeBytes}, MeshConfig{3, 1000},
                                           MeshConfig{4, 64 << 10}));

TEST_F(TcpChannelTest, KilledPeerIsReportedAsPeerLostNamingTheRank) {
  int port = server_->port();
  auto status = testing::runForked(
      2,
      [&](int rank) {
        auto t = connectRank(rank, 2, port, MeshConfig{2, 1000});
        if (!t) return 20;
        if (rank == 1) {
          uint8_t byte = 1;
          t->send(0, &byte, 1);
          ::raise(SIGKILL);
        }
        uint8_t buf[4096];
        t->recv(1, buf, 1);
        try {
          t->recv(1, buf, sizeof(buf));  // never sent: the peer dies instead
        } catch (const PeerLostError& e) {
          if (e.rank() != 1 || std::string(e.what()).find("rank 1") == std::string::npos) return 31;
          return 0;
        }
        return 32;
      },
      20000ms);
  EXPECT_TRUE(status[0].ok()) << status[0].describe();
  EXPECT_EQ(status[1].signal, SIGKILL);
}

TEST_F(TcpChannelTest, KilledPeerIsReportedWhileSending) {
  int port = server_->port();
  auto status = testing::runForked(
      2,
      [&](int rank) {
        auto t = connectRank(rank, 2, port, MeshConfig{2, 1000});
        if (!t) return 20;
        if (rank == 1) {
          uint8_t byte = 0;
          t->recv(0, &byte, 1);
          ::raise(SIGKILL);
        }
        std::vector<uint8_t> big(64 << 20, 1);  // more than the socket buffers hold
        try {
          t->send(1, big.data(), 1);
          t->send(1, big.data(), big.size());
        } catch (const PeerLostError& e) {
          return e.rank() == 1 ? 0 : 31;
        }
        return 32;
      },
      20000ms);
  EXPECT_TRUE(status[0].ok()) << status[0].describe();
  EXPECT_EQ(status[1].signal, SIGKILL);
}

}  // namespace
}  // namespace perseus::transport::tcp
