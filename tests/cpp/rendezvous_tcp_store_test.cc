#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "common/status.h"
#include "rendezvous/store_protocol.h"
#include "rendezvous/tcp_store_client.h"
#include "rendezvous/tcp_store_server.h"
#include "support/forked_ranks.h"
#include "support/forked_store_server.h"
#include "transport/tcp/auth.h"

namespace perseus::rendezvous {
namespace {

using namespace std::chrono_literals;
using transport::tcp::Clock;
using transport::tcp::Fd;

const char kSecret[] = "00112233445566778899aabbccddeeff";

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }

class TcpStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TcpStoreServer::Options options;
    options.handshake_timeout = 300ms;
    server_ = TcpStoreServer::start("127.0.0.1", 0, kSecret, options);
  }
  std::unique_ptr<TcpStoreClient> client(const std::string& secret = kSecret) {
    return std::make_unique<TcpStoreClient>("127.0.0.1", server_->port(), secret, 5000ms);
  }
  Fd rawConnect() {
    return transport::tcp::connectWithRetry(server_->address(), Clock::now() + 5s, "store");
  }
  // True when the server closes `fd` within `wait` (reads and discards anything it sends).
  static bool closedByServer(int fd, std::chrono::milliseconds wait) {
    auto deadline = Clock::now() + wait;
    while (Clock::now() < deadline) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      uint8_t buf[256];
      ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
    }
    return false;
  }
  void expectStillServing() {
    auto c = client();
    c->set("alive", bytes("yes"));
    EXPECT_EQ(c->get("alive", 1000ms), bytes("yes"));
  }

  std::unique_ptr<TcpStoreServer> server_;
};

TEST_F(TcpStoreTest, SetGetAddInOneProcess) {
  auto c = client();
  c->set("a", bytes("hello"));
  EXPECT_EQ(c->get("a", 100ms), bytes("hello"));
  c->set("a", {});
  EXPECT_TRUE(c->get("a", 100ms).empty());
  EXPECT_EQ(c->add("n", 5), 5);
  EXPECT_EQ(c->add("n", -7), -2);
  EXPECT_EQ(c->add("fresh", 0), 0);
  std::vector<uint8_t> v;
  EXPECT_FALSE(c->check("missing", &v));
  EXPECT_TRUE(c->check("a", &v));
  EXPECT_THROW(c->add("a", 1), InvalidArgumentError);
}

TEST_F(TcpStoreTest, GetTimesOutNamingTheKeyAndTheClientStaysUsable) {
  auto c = client();
  try {
    c->get("never", 100ms);
    FAIL() << "expected TimeoutError";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("never"), std::string::npos) << e.what();
  }
  c->set("after", bytes("x"));
  EXPECT_EQ(c->get("after", 100ms), bytes("x"));
}

TEST_F(TcpStoreTest, GetWaitsForALaterSet) {
  auto waiter = client();
  std::thread setter([&] {
    std::this_thread::sleep_for(50ms);
    client()->set("late", bytes("v"));
  });
  EXPECT_EQ(waiter->get("late", 5000ms), bytes("v"));
  setter.join();
}

TEST_F(TcpStoreTest, ManyProcessesSetGetAdd) {
  constexpr int kRanks = 4;
  server_.reset();  // forking beside a server thread could deadlock the children
  testing::ForkedStoreServer forked(kSecret);
  int port = forked.port();
  auto status = testing::runForked(
      kRanks,
      [&](int rank) {
        TcpStoreClient c("127.0.0.1", port, kSecret, 5000ms);
        c.add("arrived", 1);  // before the set, so a rank that sees every key sees every add
        c.set("rank/" + std::to_string(rank), bytes("value" + std::to_string(rank)));
        for (int r = 0; r < kRanks; ++r) {
          if (c.get("rank/" + std::to_string(r), 10000ms) != bytes("value" + std::to_string(r))) {
            return 10;
          }
        }
        return c.add("arrived", 0) == kRanks ? 0 : 11;
      },
      20000ms);
  for (int r = 0; r < kRanks; ++r) EXPECT_TRUE(status[r].ok()) << r << ": " << status[r].describe();
  TcpStoreClient check("127.0.0.1", port, kSecret, 5000ms);
  EXPECT_EQ(check.add("arrived", 0), kRanks);
}

TEST_F(TcpStoreTest, WrongSecretIsRefusedAndTheStoreKeepsServing) {
  EXPECT_THROW(client("ffffffffffffffffffffffffffffffff"), AuthError);
  expectStillServing();
}

TEST_F(TcpStoreTest, GarbageHandshakeIsDropped) {
  Fd fd = rawConnect();
  const char http[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_GT(::send(fd.get(), http, sizeof(http) - 1, MSG_NOSIGNAL), 0);
  EXPECT_TRUE(closedByServer(fd.get(), 2000ms));
  expectStillServing();
}

TEST_F(TcpStoreTest, TruncatedHandshakeDoesNotStallTheServerAndIsDroppedAtTheDeadline) {
  Fd fd = rawConnect();
  ASSERT_EQ(::send(fd.get(), "PRS1\x01", 5, MSG_NOSIGNAL), 5);
  expectStillServing();  // while the truncated hello is pending
  EXPECT_TRUE(closedByServer(fd.get(), 3000ms));
  Fd silent = rawConnect();
  EXPECT_TRUE(closedByServer(silent.get(), 3000ms));
  expectStillServing();
}

TEST_F(TcpStoreTest, HugeHelloMetaLengthIsDropped) {
  Fd fd = rawConnect();
  std::vector<uint8_t> hello = {'P', 'R', 'S', '1', 1, 0xff, 0xff};
  hello.resize(transport::tcp::kHelloHeaderBytes, 0);
  ASSERT_GT(::send(fd.get(), hello.data(), hello.size(), MSG_NOSIGNAL), 0);
  EXPECT_TRUE(closedByServer(fd.get(), 2000ms));
  expectStillServing();
}

TEST_F(TcpStoreTest, HugeFrameLengthAfterAuthIsDropped) {
  Fd fd = rawConnect();
  auto secret = transport::tcp::Secret::fromHex(kSecret, "test");
  transport::tcp::authenticateAsClient(fd.get(), secret, transport::tcp::Purpose::kStore, {},
                                       Clock::now() + 5s, "store");
  const uint8_t huge[] = {0xff, 0xff, 0xff, 0xff, 1, 2, 3};
  ASSERT_GT(::send(fd.get(), huge, sizeof(huge), MSG_NOSIGNAL), 0);
  EXPECT_TRUE(closedByServer(fd.get(), 2000ms));
  expectStillServing();
}

TEST_F(TcpStoreTest, TruncatedFrameThenCloseLeavesTheStoreServing) {
  Fd fd = rawConnect();
  auto secret = transport::tcp::Secret::fromHex(kSecret, "test");
  transport::tcp::authenticateAsClient(fd.get(), secret, transport::tcp::Purpose::kStore, {},
                                       Clock::now() + 5s, "store");
  const uint8_t partial[] = {0, 0, 0, 100, 1, 0};
  ASSERT_GT(::send(fd.get(), partial, sizeof(partial), MSG_NOSIGNAL), 0);
  fd.reset();
  expectStillServing();
}

// A recorded proof is worthless on a new connection: the server's nonce differs.
TEST_F(TcpStoreTest, ReplayedHandshakeIsRefused) {
  using namespace transport::tcp;
  auto secret = Secret::fromHex(kSecret, "test");
  Hello hello;
  hello.purpose = Purpose::kStore;
  fillRandom(hello.nonce, kNonceBytes);
  std::vector<uint8_t> hello_bytes = encodeHello(hello);
  auto proofFor = [&](const uint8_t* server_nonce) {
    HmacSha256 mac(secret.bytes().data(), secret.bytes().size());
    char label = 'C';
    mac.update(&label, 1);
    mac.update(hello_bytes.data(), hello_bytes.size());
    mac.update(server_nonce, kNonceBytes);
    return mac.finish();
  };
  auto deadline = Clock::now() + 5s;
  Fd first = rawConnect();
  writeAll(first.get(), hello_bytes.data(), hello_bytes.size(), deadline, -1, "store");
  uint8_t challenge[kChallengeBytes];
  readAll(first.get(), challenge, sizeof(challenge), deadline, -1, "store");
  Digest proof = proofFor(challenge);
  writeAll(first.get(), proof.data(), proof.size(), deadline, -1, "store");
  uint8_t accept = 0;
  readAll(first.get(), &accept, 1, deadline, -1, "store");
  EXPECT_EQ(accept, 1);

  Fd replay = rawConnect();
  writeAll(replay.get(), hello_bytes.data(), hello_bytes.size(), deadline, -1, "store");
  readAll(replay.get(), challenge, sizeof(challenge), deadline, -1, "store");
  writeAll(replay.get(), proof.data(), proof.size(), deadline, -1, "store");
  EXPECT_TRUE(closedByServer(replay.get(), 2000ms));
  expectStillServing();
}

TEST_F(TcpStoreTest, StopWithConnectedClientsAndPendingGets) {
  auto c = client();
  std::thread waiter([&] { EXPECT_THROW(c->get("never", 10000ms), PeerLostError); });
  std::this_thread::sleep_for(50ms);
  server_->stop();
  waiter.join();
}

TEST(StoreProtocol, RoundTripsAndRejectsBadFrames) {
  namespace p = protocol;
  p::Request set;
  set.op = p::Op::kSet;
  set.key = "k";
  set.value = bytes("value");
  std::vector<uint8_t> wire;
  p::encodeRequest(set, &wire);
  p::Request out;
  size_t consumed = 0;
  std::string error;
  for (size_t n = 0; n < wire.size(); ++n) {
    EXPECT_EQ(p::decodeRequest(wire.data(), n, &out, &consumed, &error),
              p::DecodeResult::kNeedMore);
  }
  ASSERT_EQ(p::decodeRequest(wire.data(), wire.size(), &out, &consumed, &error),
            p::DecodeResult::kOk);
  EXPECT_EQ(consumed, wire.size());
  EXPECT_EQ(out.key, "k");
  EXPECT_EQ(out.value, bytes("value"));

  std::vector<uint8_t> lying = wire;
  lying[4 + 1 + 2 + 1 + 3] ^= 1;  // value length no longer matches the body
  EXPECT_EQ(p::decodeRequest(lying.data(), lying.size(), &out, &consumed, &error),
            p::DecodeResult::kBad);
  const uint8_t zero[] = {0, 0, 0, 0};
  EXPECT_EQ(p::decodeRequest(zero, 4, &out, &consumed, &error), p::DecodeResult::kBad);
  const uint8_t bad_op[] = {0, 0, 0, 3, 99, 0, 0};
  EXPECT_EQ(p::decodeRequest(bad_op, sizeof(bad_op), &out, &consumed, &error),
            p::DecodeResult::kBad);
}

}  // namespace
}  // namespace perseus::rendezvous
