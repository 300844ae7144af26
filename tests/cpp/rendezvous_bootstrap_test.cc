// bootstrap() in forked processes with the environment a launcher would set, then data across
// every pair of ranks through the World's transport.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <set>
#include <thread>

#include "common/params.h"
#include "common/status.h"
#include "rendezvous/launch_env.h"
#include "rendezvous/tcp_store_client.h"
#include "rendezvous/world.h"
#include "support/forked_ranks.h"
#include "support/forked_store_server.h"

namespace perseus::rendezvous {
namespace {

using namespace std::chrono_literals;

const char kSecret[] = "0f1e2d3c4b5a69788796a5b4c3d2e1f0";

struct Case {
  const char* name;
  int size;
  std::vector<int> host_of_rank;  // simulated host index per rank (PERSEUS_HOSTNAME)
  const char* cpu_operations;
  bool give_placement;  // set LOCAL_*/CROSS_* like perseusrun, or leave them to be derived
  bool open_mpi;        // OMPI_COMM_WORLD_* only, no controller
};

std::ostream& operator<<(std::ostream& os, const Case& c) { return os << c.name; }

uint8_t pattern(int from, int to, size_t i) {
  return static_cast<uint8_t>(from * 37 + to * 11 + i);
}

// Exchanges a buffer with every other rank at once and checks what arrived. 0 on success.
int exchangeWithEveryPeer(World& world, size_t bytes) {
  const int rank = world.topology.rank, size = world.topology.size;
  std::vector<std::vector<uint8_t>> out(size), in(size);
  std::vector<transport::SendOp> sends;
  std::vector<transport::RecvOp> recvs;
  for (int peer = 0; peer < size; ++peer) {
    out[peer].resize(bytes);
    in[peer].assign(bytes, 0);
    for (size_t i = 0; i < bytes; ++i) out[peer][i] = pattern(rank, peer, i);
    sends.push_back({peer, out[peer].data(), bytes});
    recvs.push_back({peer, in[peer].data(), bytes});
  }
  world.transport->exchange(sends, recvs);
  for (int peer = 0; peer < size; ++peer) {
    for (size_t i = 0; i < bytes; ++i) {
      if (in[peer][i] != pattern(peer, rank, i)) {
        std::fprintf(stderr, "rank %d: byte %zu from rank %d is wrong\n", rank, i, peer);
        return 40;
      }
    }
  }
  return 0;
}

void setEnv(const char* name, const std::string& value) { ::setenv(name, value.c_str(), 1); }

class BootstrapTest : public ::testing::TestWithParam<Case> {};

TEST_P(BootstrapTest, ConnectsEveryPairAndFillsTheTopology) {
  const Case c = GetParam();
  testing::ForkedStoreServer server(kSecret);
  const int port = server.port();
  const std::string job = "gtest" + std::to_string(::getpid()) + c.name;
  // Placement as perseusrun computes it: local = rank among its host, cross = host index.
  std::vector<int> local_rank(c.size), local_size(c.size), cross_size(c.size), cross_rank(c.size);
  std::map<int, int> per_host;
  for (int r = 0; r < c.size; ++r) local_rank[r] = per_host[c.host_of_rank[r]]++;
  for (int r = 0; r < c.size; ++r) {
    local_size[r] = per_host[c.host_of_rank[r]];
    cross_rank[r] = 0;
    cross_size[r] = 0;
    for (int q = 0; q < c.size; ++q) {
      if (local_rank[q] != local_rank[r]) continue;
      if (q < r) ++cross_rank[r];
      ++cross_size[r];
    }
  }
  auto status = testing::runForked(
      c.size,
      [&](int rank) {
        const int host = c.host_of_rank[rank];
        if (c.open_mpi) {
          setEnv("OMPI_COMM_WORLD_RANK", std::to_string(rank));
          setEnv("OMPI_COMM_WORLD_SIZE", std::to_string(c.size));
          setEnv("OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(rank));
          setEnv("OMPI_COMM_WORLD_LOCAL_SIZE", std::to_string(c.size));
          setEnv("OMPI_MCA_ess_base_jobid", job);
        } else {
          setEnv("PERSEUS_RANK", std::to_string(rank));
          setEnv("PERSEUS_SIZE", std::to_string(c.size));
          setEnv("PERSEUS_CONTROLLER_ADDR", "127.0.0.1");
          setEnv("PERSEUS_CONTROLLER_PORT", std::to_string(port));
          setEnv("PERSEUS_SECRET", kSecret);
          setEnv("PERSEUS_HOSTNAME", "host" + std::to_string(host));
          setEnv("PERSEUS_IFACE", "127.0.0." + std::to_string(host + 1));
          if (c.give_placement) {
            setEnv("PERSEUS_LOCAL_RANK", std::to_string(local_rank[rank]));
            setEnv("PERSEUS_LOCAL_SIZE", std::to_string(local_size[rank]));
            setEnv("PERSEUS_CROSS_RANK", std::to_string(cross_rank[rank]));
            setEnv("PERSEUS_CROSS_SIZE", std::to_string(cross_size[rank]));
          }
        }
        setEnv("PERSEUS_CPU_OPERATIONS", c.cpu_operations);
        setEnv("PERSEUS_START_TIMEOUT", "20");
        setEnv("PERSEUS_TIMEOUT", "20");
        setEnv("PERSEUS_TCP_CONNECTIONS", "3");
        auto world = bootstrap(Params::fromEnvironment());
        const Topology& t = world->topology;
        if (t.rank != rank || t.size != c.size) return 30;
        if (t.local_rank != local_rank[rank] || t.local_size != local_size[rank]) return 31;
        if (t.cross_rank != cross_rank[rank] || t.cross_size != cross_size[rank]) return 32;
        if (static_cast<int>(t.hostnames.size()) != c.size) return 33;
        if (static_cast<int>(t.local_ranks.size()) != t.local_size ||
            t.local_ranks[t.local_rank] != rank)
          return 34;
        if (static_cast<int>(t.cross_ranks.size()) != t.cross_size ||
            t.cross_ranks[t.cross_rank] != rank)
          return 35;
        const bool expect_arena = t.local_size > 1 && std::string(c.cpu_operations) != "tcp";
        if ((world->arena != nullptr) != expect_arena) return 36;
        if (c.size > 1 && !world->store) return 37;
        for (size_t bytes : {size_t{1}, size_t{4099}, size_t{1} << 20}) {
          if (int rc = exchangeWithEveryPeer(*world, bytes)) return rc;
        }
        return 0;
      },
      60000ms);
  for (int r = 0; r < c.size; ++r) {
    EXPECT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r].describe();
  }
  if (c.open_mpi) {
    EXPECT_NE(::access(("/tmp/perseus-ompi-" + job + ".store").c_str(), F_OK), 0)
        << "the discovery file must be removed after rendezvous";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Worlds, BootstrapTest,
    ::testing::Values(Case{"one", 1, {0}, "auto", true, false},
                      Case{"two", 2, {0, 0}, "auto", true, false},
                      Case{"three", 3, {0, 0, 0}, "auto", false, false},
                      Case{"four", 4, {0, 0, 0, 0}, "auto", true, false},
                      Case{"four_tcp", 4, {0, 0, 0, 0}, "tcp", true, false},
                      Case{"two_hosts", 4, {0, 0, 1, 1}, "auto", true, false},
                      Case{"two_hosts_derived", 3, {0, 1, 0}, "auto", false, false},
                      Case{"open_mpi_one_host", 3, {0, 0, 0}, "auto", true, true}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

TEST(Bootstrap, SingleRankWhenNothingIsSet) {
  for (const char* v :
       {"PERSEUS_RANK", "PERSEUS_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"}) {
    ASSERT_EQ(std::getenv(v), nullptr) << v << " is set in the test environment";
  }
  auto world = bootstrap(Params());
  EXPECT_EQ(world->topology.size, 1);
  EXPECT_EQ(world->topology.hostnames.size(), 1u);
  EXPECT_EQ(exchangeWithEveryPeer(*world, 1000), 0);
}

TEST(Bootstrap, MissingRanksTimeOutNamingThem) {
  testing::ForkedStoreServer server(kSecret);
  const int port = server.port();
  auto status = testing::runForked(
      2,
      [&](int rank) {
        setEnv("PERSEUS_RANK", std::to_string(rank));
        setEnv("PERSEUS_SIZE", "4");
        setEnv("PERSEUS_CONTROLLER_ADDR", "127.0.0.1");
        setEnv("PERSEUS_CONTROLLER_PORT", std::to_string(port));
        setEnv("PERSEUS_SECRET", kSecret);
        setEnv("PERSEUS_START_TIMEOUT", "1");
        try {
          bootstrap(Params::fromEnvironment());
        } catch (const TimeoutError& e) {
          return std::string(e.what()).find("ranks 2, 3") != std::string::npos ? 0 : 50;
        }
        return 51;
      },
      20000ms);
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(status[r].ok()) << r << ": " << status[r].describe();
}

// Rank 0 of a 2-rank membership "elastic/1/" that the launcher gives up on: 0 when bootstrap
// fails with PeerLostError naming rank 1 (and, with `check_rank`, carrying it) well before
// PERSEUS_START_TIMEOUT; 80 or 81 otherwise.
int rankZeroOfAbortedEpoch(int port, bool check_rank) {
  setEnv("PERSEUS_RANK", "0");
  setEnv("PERSEUS_SIZE", "2");
  setEnv("PERSEUS_CONTROLLER_ADDR", "127.0.0.1");
  setEnv("PERSEUS_CONTROLLER_PORT", std::to_string(port));
  setEnv("PERSEUS_SECRET", kSecret);
  setEnv("PERSEUS_STORE_PREFIX", "elastic/1/");
  setEnv("PERSEUS_START_TIMEOUT", "30");
  const auto start = std::chrono::steady_clock::now();
  try {
    bootstrap(Params::fromEnvironment());
  } catch (const PeerLostError& e) {
    const bool named = (!check_rank || e.rank() == 1) &&
                       std::string(e.what()).find(
                           "rank 1 was lost while this membership started") != std::string::npos;
    const bool soon = std::chrono::steady_clock::now() - start < 10s;
    return named && soon ? 0 : 80;
  }
  return 81;
}

// Note [Epoch isolation]: a membership the launcher gave up on (its abort key set) ends a
// rendezvous still waiting for a member at once, not at PERSEUS_START_TIMEOUT.
TEST(Bootstrap, AbortedEpochEndsAWaitingRendezvous) {
  testing::ForkedStoreServer server(kSecret);
  const int port = server.port();
  auto status = testing::runForked(
      2,
      [&](int rank) {
        if (rank == 1) {  // the launcher, not a rank: it gives up on epoch 1
          std::this_thread::sleep_for(300ms);
          TcpStoreClient launcher("127.0.0.1", port, kSecret, 5000ms);
          launcher.set("elastic/1/perseus/abort", {1});
          return 0;
        }
        return rankZeroOfAbortedEpoch(port, false);
      },
      40000ms);
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(status[r].ok()) << r << ": " << status[r].describe();
}

// The same once every record is in, while the ranks of a host set up shared memory: a member
// lost there (its record published, its segment never made) ends the others' wait when the
// launcher gives the membership up, not at PERSEUS_START_TIMEOUT.
TEST(Bootstrap, AbortedEpochEndsTheSharedMemorySetUp) {
  testing::ForkedStoreServer server(kSecret);
  const int port = server.port();
  auto status = testing::runForked(
      2,
      [&](int rank) {
        if (rank == 1) {  // rank 1's record, then rank 1 is lost; then the launcher gives up
          TcpStoreClient launcher("127.0.0.1", port, kSecret, 5000ms);
          const std::string record = "2\nhost\n127.0.0.1:1";  // size, host, address
          launcher.set("elastic/1/perseus/rank/1", {record.begin(), record.end()});
          std::this_thread::sleep_for(1000ms);
          launcher.set("elastic/1/perseus/abort", {1});
          return 0;
        }
        setEnv("PERSEUS_HOSTNAME", "host");
        return rankZeroOfAbortedEpoch(port, true);
      },
      40000ms);
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(status[r].ok()) << r << ": " << status[r].describe();
}

TEST(Bootstrap, DuplicateRankIsRefused) {
  testing::ForkedStoreServer server(kSecret);
  const int port = server.port();
  auto status = testing::runForked(
      2,
      [&](int) {
        setEnv("PERSEUS_RANK", "0");
        setEnv("PERSEUS_SIZE", "2");
        setEnv("PERSEUS_CONTROLLER_ADDR", "127.0.0.1");
        setEnv("PERSEUS_CONTROLLER_PORT", std::to_string(port));
        setEnv("PERSEUS_SECRET", kSecret);
        setEnv("PERSEUS_START_TIMEOUT", "1");
        try {
          bootstrap(Params::fromEnvironment());
        } catch (const InvalidArgumentError& e) {
          return std::string(e.what()).find("rank 0") != std::string::npos ? 70 : 71;
        } catch (const TimeoutError&) {
          return 72;  // the first one waits for rank 1, which never comes
        }
        return 73;
      },
      20000ms);
  std::multiset<int> codes = {status[0].exit_code, status[1].exit_code};
  EXPECT_EQ(codes, (std::multiset<int>{70, 72}));
}

TEST(Bootstrap, InconsistentLocalSizeNamesTheVariable) {
  testing::ForkedStoreServer server(kSecret);
  const int port = server.port();
  auto status = testing::runForked(
      2,
      [&](int rank) {
        setEnv("PERSEUS_RANK", std::to_string(rank));
        setEnv("PERSEUS_SIZE", "2");
        setEnv("PERSEUS_LOCAL_RANK", std::to_string(rank));
        setEnv("PERSEUS_LOCAL_SIZE", "2");
        setEnv("PERSEUS_HOSTNAME", rank == 0 ? "a" : "b");  // but two hosts
        setEnv("PERSEUS_CONTROLLER_ADDR", "127.0.0.1");
        setEnv("PERSEUS_CONTROLLER_PORT", std::to_string(port));
        setEnv("PERSEUS_SECRET", kSecret);
        setEnv("PERSEUS_START_TIMEOUT", "10");
        try {
          bootstrap(Params::fromEnvironment());
        } catch (const InvalidArgumentError& e) {
          return std::string(e.what()).find("PERSEUS_LOCAL_SIZE") != std::string::npos ? 0 : 60;
        }
        return 61;
      },
      20000ms);
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(status[r].ok()) << r << ": " << status[r].describe();
}

TEST(LaunchEnv, ReadsAndValidatesVariables) {
  std::map<std::string, std::string> env;
  auto lookup = [&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  EXPECT_EQ(readLaunchInfo(lookup).launcher, Launcher::kSingle);
  env = {{"PERSEUS_RANK", "1"}};
  EXPECT_THROW(readLaunchInfo(lookup), InvalidArgumentError);
  env = {{"PERSEUS_RANK", "2"}, {"PERSEUS_SIZE", "2"}};
  EXPECT_THROW(readLaunchInfo(lookup), InvalidArgumentError);
  env = {{"PERSEUS_RANK", "1"}, {"PERSEUS_SIZE", "2"}};
  try {
    readLaunchInfo(lookup);
    ADD_FAILURE() << "a multi-rank job without a controller must be refused";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("PERSEUS_CONTROLLER_ADDR"), std::string::npos);
  }
  env = {{"PERSEUS_RANK", "1"},
         {"PERSEUS_SIZE", "2"},
         {"PERSEUS_CONTROLLER_ADDR", "h"},
         {"PERSEUS_CONTROLLER_PORT", "99999"},
         {"PERSEUS_SECRET", "ab"}};
  EXPECT_THROW(readLaunchInfo(lookup), InvalidArgumentError);
  env["PERSEUS_CONTROLLER_PORT"] = "1234";
  env["PERSEUS_HOSTNAME"] = "nodeA";
  LaunchInfo info = readLaunchInfo(lookup);
  EXPECT_EQ(info.launcher, Launcher::kPerseus);
  EXPECT_EQ(info.controller_port, 1234);
  EXPECT_EQ(info.topology.hostname, "nodeA");
  EXPECT_FALSE(info.has_local);
  env = {{"OMPI_COMM_WORLD_RANK", "3"},
         {"OMPI_COMM_WORLD_SIZE", "4"},
         {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
         {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
         {"PMIX_NAMESPACE", "ns@1"}};
  info = readLaunchInfo(lookup);
  EXPECT_EQ(info.launcher, Launcher::kOpenMpi);
  EXPECT_EQ(info.topology.local_rank, 1);
  EXPECT_EQ(info.ompi_job_id, "ns@1");
}

TEST(LaunchEnv, DerivesPlacementFromHostNames) {
  Topology t;
  t.size = 5;
  t.rank = 3;
  t.hostnames = {"b", "a", "b", "a", "c"};
  derivePlacement(&t);
  EXPECT_EQ(t.local_ranks, (std::vector<int>{1, 3}));
  EXPECT_EQ(t.local_rank, 1);
  EXPECT_EQ(t.cross_ranks, (std::vector<int>{2, 3}));  // local rank 1 of hosts b and a
  EXPECT_EQ(t.cross_rank, 1);
  EXPECT_EQ(t.cross_size, 2);
}

}  // namespace
}  // namespace perseus::rendezvous
