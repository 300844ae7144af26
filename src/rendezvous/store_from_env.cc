#include "rendezvous/store_from_env.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/logging.h"
#include "common/status.h"
#include "rendezvous/horovodrun_store.h"
#include "rendezvous/job_secret.h"
#include "rendezvous/open_mpi_runtime.h"
#include "rendezvous/pmi_client.h"
#include "rendezvous/tcp_store_client.h"
#include "rendezvous/tcp_store_server.h"
#include "transport/tcp/auth.h"
#include "transport/tcp/iface.h"

// Note [Store discovery]
// perseusrun starts the store and passes PERSEUS_CONTROLLER_ADDR/_PORT and PERSEUS_SECRET to
// every rank; those always win. Under a bare `mpirun` nothing names a store, so:
//  - all ranks on one host (OMPI_COMM_WORLD_LOCAL_SIZE == _SIZE): rank 0 starts a store on
//    127.0.0.1:0 with a random secret and writes "port secret" into
//    /tmp/perseus-ompi-<job id>.store, created 0600 under a temporary name and renamed into
//    place, so readers never see half a file. The others poll for it, and trust it only if it
//    is a regular file owned by their uid with no group/other access. Rank 0 deletes it once
//    every rank has reached the store;
//  - several hosts: rank 0 starts a store on its outward address and MPI_Bcast shares
//    "host port secret", through Open MPI's libmpi loaded at run time (whatever headers the
//    build had; Note [Open MPI at run time]); when libmpi cannot be loaded, an
//    InvalidArgumentError that says what to do.
// Under MPICH's or Intel MPI's mpiexec (Hydra), rank 0 starts a store (on 127.0.0.1 when the
// job has one host, else on its outward address) with a random secret and puts "host,port,
// secret" into the job's PMI key-value space; the others read it after a PMI barrier. PMI_FD
// must be an open socket (checked first, so that a wrapper that closed it is named).
// Under torchrun and srun (Note [Launchers]) the ranks know rank 0's host but nothing else:
// rank 0 serves the store there on all addresses (PERSEUS_IFACE narrows it) at PERSEUS_PORT
// or the port derived from the launcher's variables, and the secret is the user's
// (job_secret.h), keyed to the job so that another job's store at the same port refuses it.

namespace perseus::rendezvous {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Keeps the server that this rank started alive as long as the store is used.
class ServerBackedStore : public Store {
 public:
  ServerBackedStore(std::unique_ptr<TcpStoreServer> server, std::unique_ptr<Store> client)
      : server_(std::move(server)), client_(std::move(client)) {}
  ~ServerBackedStore() override {
    client_.reset();
    server_.reset();
  }
  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    client_->set(key, value);
  }
  std::vector<uint8_t> get(const std::string& key, std::chrono::milliseconds timeout) override {
    return client_->get(key, timeout);
  }
  int64_t add(const std::string& key, int64_t delta) override { return client_->add(key, delta); }

 private:
  std::unique_ptr<TcpStoreServer> server_;
  std::unique_ptr<Store> client_;
};

std::chrono::milliseconds startTimeout(const Params& params) {
  return std::chrono::milliseconds(static_cast<int64_t>(params.start_timeout_s * 1000));
}

std::string discoveryPath(const std::string& job_id) {
  std::string safe;
  for (char c : job_id) safe.push_back(std::isalnum(static_cast<unsigned char>(c)) ? c : '_');
  return "/tmp/perseus-ompi-" + safe + ".store";
}

}  // namespace

StoreConnection startLocalServer(const std::string& host, const Params& params, int* port,
                                 const std::string& secret_hex) {
  StoreConnection out;
  out.secret_hex = secret_hex.empty() ? transport::tcp::Secret::random().hex() : secret_hex;
  auto server = TcpStoreServer::start(host, *port, out.secret_hex);
  *port = server->port();
  auto client = std::make_unique<TcpStoreClient>(host, *port, out.secret_hex, startTimeout(params));
  out.store = std::make_unique<ServerBackedStore>(std::move(server), std::move(client));
  return out;
}

namespace {

void writeDiscoveryFile(const std::string& path, int port, const std::string& secret_hex) {
  std::string tmp = path + ".tmp" + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    throw InternalError(PERSEUS_STR("cannot create " << tmp << ": " << std::strerror(errno)));
  }
  std::string text = std::to_string(port) + " " + secret_hex + "\n";
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ok = (::close(fd) == 0) && ok;
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    throw InternalError(PERSEUS_STR("cannot publish the store address in "
                                    << path << ": " << std::strerror(errno)));
  }
}

// Returns false while the file is absent or not yet trustworthy.
bool readDiscoveryFile(const std::string& path, int* port, std::string* secret_hex) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return false;
  struct stat st;
  bool trusted = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::getuid() &&
                 (st.st_mode & 077) == 0;
  char buf[256] = {};
  ssize_t n = trusted ? ::read(fd, buf, sizeof(buf) - 1) : -1;
  ::close(fd);
  if (!trusted) {
    PERSEUS_LOG(WARNING, kRendezvous) << "ignoring " << path << ": not a private file of this user";
    return false;
  }
  if (n <= 0) return false;
  std::istringstream in(std::string(buf, static_cast<size_t>(n)));
  return static_cast<bool>(in >> *port >> *secret_hex) && *port > 0 && *port < 65536;
}

StoreConnection singleHostOpenMpi(const LaunchInfo& info, const Params& params) {
  if (info.ompi_job_id.empty()) {
    throw InvalidArgumentError(
        "running under Open MPI but neither OMPI_MCA_ess_base_jobid nor PMIX_NAMESPACE is set, "
        "so the ranks cannot find each other; use perseusrun, or set PERSEUS_CONTROLLER_ADDR/"
        "_PORT and PERSEUS_SECRET");
  }
  const std::string path = discoveryPath(info.ompi_job_id);
  if (info.topology.rank == 0) {
    int port = 0;
    StoreConnection out = startLocalServer("127.0.0.1", params, &port);
    writeDiscoveryFile(path, port, out.secret_hex);
    out.after_rendezvous = [path] { ::unlink(path.c_str()); };
    return out;
  }
  auto deadline = Clock::now() + startTimeout(params);
  int port = 0;
  std::string secret;
  while (!readDiscoveryFile(path, &port, &secret)) {
    if (Clock::now() >= deadline) {
      throw TimeoutError(PERSEUS_STR("rank " << info.topology.rank << ": rank 0 did not publish "
                                             << path << " within PERSEUS_START_TIMEOUT="
                                             << params.start_timeout_s << " s; did rank 0 start?"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  StoreConnection out;
  out.secret_hex = secret;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  out.store = std::make_unique<TcpStoreClient>("127.0.0.1", port, secret,
                                               std::max(left, std::chrono::milliseconds(1000)));
  return out;
}

// Hydra hands each process one end of a socket pair as PMI_FD. A wrapper between mpiexec and
// the program that closes inherited descriptors leaves PMI_FD naming nothing, or another file.
void checkPmiSocket(const LaunchInfo& info) {
  struct stat st {};
  std::string problem;
  if (::fstat(info.pmi_fd, &st) != 0) {
    problem = std::strerror(errno);
  } else if (!S_ISSOCK(st.st_mode)) {
    problem = "it is open but not a socket";
  }
  if (problem.empty()) return;
  throw InvalidArgumentError(PERSEUS_STR(
      "started by " << launcherName(info.launcher) << ": PMI_FD=" << info.pmi_fd
                    << " is not the PMI socket that mpiexec opened for this process (" << problem
                    << "), so the ranks cannot share the rendezvous store's address; something "
                       "between mpiexec and Python closed the descriptor (a wrapper script, a "
                       "container runtime, a daemonising step): start Python directly under "
                       "mpiexec or keep the descriptor open, or start the job with perseusrun "
                       "(launcher variables seen: "
                    << info.seen << ")"));
}

}  // namespace

std::string publishedStore(const std::string& host, int port, const std::string& secret_hex) {
  return host + "," + std::to_string(port) + "," + secret_hex;
}

StoreConnection connectPublished(std::string value, const char* via, const Params& params) {
  const std::string published = value;
  for (char& c : value) c = c == ',' ? ' ' : c;
  std::istringstream in(value);
  std::string host;
  int port = 0;
  StoreConnection out;
  if (!(in >> host >> port >> out.secret_hex)) {
    throw InternalError("rank 0 published '" + published + "' as the store's address through " +
                        via + "; are all ranks running the same Perseus?");
  }
  out.store = std::make_unique<TcpStoreClient>(host, port, out.secret_hex, startTimeout(params));
  return out;
}

namespace {

StoreConnection hydraStore(const LaunchInfo& info, const Params& params) {
  checkPmiSocket(info);
  PmiClient pmi(info.pmi_fd, startTimeout(params));
  const Topology& t = info.topology;
  const bool all_local = info.has_local && t.local_size == t.size;
  StoreConnection out;
  const char* key = "perseus_store";
  if (t.rank == 0) {
    std::string host =
        all_local && params.iface.empty()
            ? std::string("127.0.0.1")
            : transport::tcp::chooseListenHost(params.iface, std::string(), 0, false);
    int port = static_cast<int>(params.port);
    out = startLocalServer(host, params, &port);
    pmi.put(key, publishedStore(host, port, out.secret_hex));
  }
  pmi.barrier();
  if (t.rank != 0) out = connectPublished(pmi.get(key), "PMI", params);
  // Perseus is done with PMI; an MPI library that the program loads later opens its own.
  pmi.finalize();
  return out;
}

// Note [Derived store port]
// Without PERSEUS_PORT the store's port is derived from what every rank sees (torchrun:
// MASTER_PORT+1; Slurm: the job and step ids), but nothing reserves it: any socket on rank 0's
// host may hold it, an ephemeral client port included (under `torchrun --standalone` that was
// about one start in eight on a 2-core machine). So the derived port is the first of
// kDerivedPortCandidates consecutive ports: rank 0 listens on the first free one, and the
// others try them in turn until the start timeout, skipping what refuses, answers nothing or
// fails authentication (not this job's store). A port the user gave (PERSEUS_PORT) is the only
// one tried.
// Each candidate gets one connection attempt, not a retry loop: retrying a refusing port until
// its slice of time ran out cost 8 x 250 ms whenever a rank arrived before rank 0 had opened
// the store. Only the TCP connect is bounded by kCandidateConnect; an accepted connection gets
// kCandidateHandshake, so that a loaded rank 0 that answers slowly is not abandoned in the
// middle of the handshake (which its store would log as a peer with a different secret).
constexpr std::chrono::milliseconds kCandidateConnect{250};
constexpr std::chrono::milliseconds kCandidateHandshake{5000};
// How long a rank that finds no store yet retries every 2 ms before it backs off.
constexpr std::chrono::milliseconds kEagerRetries{500};

StoreConnection storeOnRankZeroHost(const LaunchInfo& info, const Params& params) {
  const std::string secret = userSecretHex(info, params.secret_file);
  const bool given = params.port != 0;
  const int first = given ? static_cast<int>(params.port) : info.derived_port;
  const int candidates = given ? 1 : std::min(kDerivedPortCandidates, 65536 - first);
  const std::string origin =
      given ? std::string("PERSEUS_PORT")
            : std::string(info.launcher == Launcher::kTorchrun ? "MASTER_PORT+1"
                                                               : "derived from SLURM_JOB_ID/"
                                                                 "SLURM_STEP_ID");
  const std::string where =
      candidates == 1 ? PERSEUS_STR(info.store_host << ":" << first << " (" << origin << ")")
                      : PERSEUS_STR(info.store_host << ":" << first << "-" << first + candidates - 1
                                                    << " (" << origin << " and the "
                                                    << candidates - 1 << " ports after it)");
  if (info.topology.rank == 0) {
    const std::string bind = params.iface.empty()
                                 ? std::string("0.0.0.0")
                                 : transport::tcp::chooseListenHost(params.iface, "", 0, false);
    for (int k = 0;; ++k) {
      int port = first + k;
      try {
        return startLocalServer(bind, params, &port, secret);
      } catch (const InvalidArgumentError& e) {
        if (k + 1 < candidates) continue;  // taken: the next candidate
        throw InvalidArgumentError(PERSEUS_STR(
            "rank 0 (" << launcherName(info.launcher) << ") cannot open the rendezvous store at "
                       << where << ": " << e.what()
                       << "; set PERSEUS_PORT to a free port, the same on every rank"));
      }
    }
  }
  const auto deadline = Clock::now() + startTimeout(params);
  std::string auth_failure;
  auto pause = std::chrono::milliseconds(2);
  const auto started = Clock::now();
  while (true) {
    for (int k = 0; k < candidates; ++k) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      StoreConnection out;
      out.secret_hex = secret;
      try {
        if (candidates == 1) {  // retries on the one port until the deadline
          out.store = std::make_unique<TcpStoreClient>(info.store_host, first, secret,
                                                       std::max(left, milliseconds(1)));
          return out;
        }
        out.store =
            TcpStoreClient::tryConnect(info.store_host, first + k, secret,
                                       std::min(left, kCandidateConnect), kCandidateHandshake);
        if (out.store) return out;
      } catch (const AuthError& e) {
        auth_failure = e.what();  // another job's store, or a different secret
      } catch (const TimeoutError&) {
      } catch (const PeerLostError&) {
      }
    }
    if (Clock::now() >= deadline) break;
    // Nothing listens yet on any candidate: rank 0 has not opened the store. Ranks start
    // within milliseconds of each other, so the first tries come every 2 ms (a refused
    // connect costs microseconds): a doubling pause from the start added up to its last step
    // (16-32 ms) to a start whose store opened just after a try. Later tries back off, so
    // that many waiting ranks do not flood the store's host.
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - Clock::now()));
    if (Clock::now() - started > kEagerRetries) pause = std::min(pause * 2, milliseconds(100));
  }
  if (!auth_failure.empty()) {
    throw AuthError(PERSEUS_STR(
        "rank " << info.topology.rank << " reached a store at " << where
                << " that is not this job's (" << auth_failure
                << "): another job uses the port, or the ranks were given different "
                   "PERSEUS_SECRETs; set PERSEUS_PORT to a free port and the same secret on "
                   "every rank"));
  }
  throw TimeoutError(PERSEUS_STR(
      "rank " << info.topology.rank << " (" << launcherName(info.launcher)
              << ") found no rendezvous store at " << where
              << " within PERSEUS_START_TIMEOUT=" << params.start_timeout_s
              << " s; rank 0 opens it there: did rank 0 start, is " << info.store_host
              << " its address as seen from here, and does a firewall let the port through?"));
}

StoreConnection multiHostOpenMpi(const LaunchInfo& info, const Params& params) {
  StoreConnection out;
  std::string message;
  if (info.topology.rank == 0) {
    std::string host = transport::tcp::chooseListenHost(params.iface, std::string(), 0, false);
    int port = 0;
    out = startLocalServer(host, params, &port);
    message = publishedStore(host, port, out.secret_hex);
  }
  // The MPI data plane keeps MPI for the job; otherwise MPI served only this broadcast.
  message = openMpiBroadcast(message, params.cpu_operations == "mpi");
  if (info.topology.rank == 0) return out;
  return connectPublished(std::move(message), "an MPI broadcast", params);
}

}  // namespace

StoreConnection connectStore(const LaunchInfo& info, const Params& params) {
  if (!info.controller_host.empty()) {
    StoreConnection out;
    out.secret_hex = info.secret_hex;
    out.store = std::make_unique<TcpStoreClient>(info.controller_host, info.controller_port,
                                                 info.secret_hex, startTimeout(params));
    return out;
  }
  if (info.launcher == Launcher::kHydra) return hydraStore(info, params);
  if (info.launcher == Launcher::kHorovodrun) return horovodrunStore(info, params);
  if (info.launcher == Launcher::kTorchrun || info.launcher == Launcher::kSlurm) {
    return storeOnRankZeroHost(info, params);
  }
  PERSEUS_CHECK(info.launcher == Launcher::kOpenMpi, "no controller for a multi-rank launch");
  if (info.has_local && info.topology.local_size == info.topology.size) {
    return singleHostOpenMpi(info, params);
  }
  return multiHostOpenMpi(info, params);
}

}  // namespace perseus::rendezvous
