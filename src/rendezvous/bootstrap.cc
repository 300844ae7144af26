// bootstrap(): environment -> store -> addresses of all ranks -> shared memory within a host and
// authenticated TCP across hosts -> one ChannelTransport.
//
// Store keys (all under "perseus/", itself under PERSEUS_STORE_PREFIX when that is set):
//   job_id     set by rank 0 before its rank record: names the shared-memory segments
//   claim/<r>  counter: a second process with the same rank is refused
//   rank/<r>   "<size>\n<hostname>\n<data-plane host:port>" of rank r
//   shm/<host index>/<n>, shm/<host index>/<n>/done   the n-th local barrier of a host
//
// Note [Re-initialisation]
// init() after shutdown() in the same process bootstraps again from the same environment; every
// rank does so the same number of times (Horovod's contract). Without PERSEUS_STORE_PREFIX (the
// elastic epochs have their own), the n-th multi-rank bootstrap of a process (n > 0) keeps its
// keys under "init<n>/" (perseusrun's store still holds the earlier claims), names its
// shared-memory segments "<job id>-i<n>", and keys a store that rank 0 serves (torchrun, srun)
// to "<launch id>/init<n>" on the next range of candidate ports for odd n, so that a rank that
// comes back first never reaches the earlier store that rank 0 may not have closed yet (and
// were it to, that store would refuse it).
#include <atomic>
#include <cstdlib>
#include <sstream>

#include "common/logging.h"
#include "common/status.h"
#include "rendezvous/launch_env.h"
#include "rendezvous/prefix_store.h"
#include "rendezvous/store_from_env.h"
#include "rendezvous/world.h"
#include "transport/channel_transport.h"
#include "transport/mpi/mpi_channels.h"
#include "transport/shm/cpu_budget.h"
#include "transport/shm/shm_local_group.h"
#include "transport/tcp/iface.h"
#include "transport/tcp/tcp_mesh.h"

namespace perseus::rendezvous {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Multi-rank bootstraps started by this process without a store prefix (Note [Re-initialisation]).
std::atomic<int> g_bootstraps{0};

std::vector<uint8_t> toBytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string fromBytes(const std::vector<uint8_t>& v) { return {v.begin(), v.end()}; }

milliseconds until(Clock::time_point deadline) {
  return std::max(milliseconds(1),
                  std::chrono::duration_cast<milliseconds>(deadline - Clock::now()));
}

std::string rankKey(int r) { return "perseus/rank/" + std::to_string(r); }

// True once the launcher has given up on this membership (perseus/abort, set by perseusrun's
// elastic driver when a member is lost before the rendezvous completed).
bool aborted(Store& store) {
  try {
    store.get("perseus/abort", milliseconds(1));
    return true;
  } catch (const TimeoutError&) {
    return false;
  }
}

// Waits for `key`, which rank r sets. An elastic membership (abortable) is waited for in slices,
// so that a member lost during start-up ends the wait at once instead of at the deadline: at any
// step of the start-up, before its record as after it (the shared-memory set-up).
std::vector<uint8_t> waitForRank(Store& store, const std::string& key, int r, bool abortable,
                                 Clock::time_point deadline) {
  if (!abortable) return store.get(key, until(deadline));
  while (true) {
    try {
      return store.get(key, std::min(milliseconds(200), until(deadline)));
    } catch (const TimeoutError&) {
      if (Clock::now() >= deadline) throw;
    }
    if (aborted(store)) {
      throw PeerLostError(r, PERSEUS_STR("rank " << r
                                                 << " was lost while this membership "
                                                    "started; perseusrun publishes the next one"));
    }
  }
}

std::vector<uint8_t> waitRecord(Store& store, int r, bool abortable, Clock::time_point deadline) {
  return waitForRank(store, rankKey(r), r, abortable, deadline);
}

// Waits for every rank's record; on timeout names all the ranks still missing.
std::vector<std::string> gatherRecords(Store& store, const Topology& t, double timeout_s,
                                       bool abortable, Clock::time_point deadline) {
  std::vector<std::string> records(t.size);
  for (int r = 0; r < t.size; ++r) {
    try {
      records[r] = fromBytes(waitRecord(store, r, abortable, deadline));
    } catch (const TimeoutError&) {
      std::ostringstream missing;
      for (int m = r; m < t.size; ++m) {
        try {
          store.get(rankKey(m), milliseconds(1));
        } catch (const TimeoutError&) {
          missing << (missing.tellp() > 0 ? ", " : "") << m;
        }
      }
      throw TimeoutError(PERSEUS_STR("rank " << t.rank << ": ranks " << missing.str()
                                             << " did not reach the rendezvous store within "
                                                "PERSEUS_START_TIMEOUT="
                                             << timeout_s
                                             << " s; check that they started and can reach "
                                                "PERSEUS_CONTROLLER_ADDR"));
    }
  }
  return records;
}

// Note [Binding ranks to cores] (transport/shm/cpu_budget.h).
void bindRank(const Topology& t) {
  const std::vector<int> cpus = transport::shm::bindToShare(t.local_rank, t.local_size);
  if (cpus.empty()) {
    PERSEUS_LOG(INFO, kRendezvous)
        << "PERSEUS_BIND_TO=core: not bound (" << t.local_size << " ranks on this host, "
        << transport::shm::usableCpus() << " usable cores)";
    return;
  }
  std::ostringstream list;
  for (size_t i = 0; i < cpus.size(); ++i) list << (i ? "," : "") << cpus[i];
  PERSEUS_LOG(INFO, kRendezvous) << "local rank " << t.local_rank << " bound to CPUs "
                                 << list.str();
}

// PERSEUS_PORT_RANGE="lo-hi" (empty: any port).
void parsePortRange(const std::string& text, int* lo, int* hi) {
  if (text.empty()) return;
  char dash = 0;
  std::istringstream in(text);
  std::string rest;
  if (!(in >> *lo >> dash >> *hi) || dash != '-' || (in >> rest) || *lo < 1 || *hi > 65535 ||
      *lo > *hi) {
    throw InvalidArgumentError(
        PERSEUS_STR("PERSEUS_PORT_RANGE='" << text << "' is not a port range like 30000-30100"));
  }
}

std::unique_ptr<World> singleRank(const LaunchInfo& info, const Params& params) {
  auto world = std::make_unique<World>();
  world->topology = info.topology;
  Topology& t = world->topology;
  t.hostnames = {t.hostname};
  t.local_rank = t.cross_rank = 0;
  t.local_size = t.cross_size = 1;
  t.local_ranks = {0};
  t.cross_ranks = {0};
  std::vector<std::unique_ptr<transport::Channel>> channels(1);
  world->transport = std::make_unique<transport::ChannelTransport>(0, std::move(channels), params);
  return world;
}

// PERSEUS_CPU_OPERATIONS=mpi needs mpirun's world.
void checkMpiLauncher(const LaunchInfo& info, bool use_mpi) {
  if (use_mpi && info.launcher != Launcher::kOpenMpi) {
    throw InvalidArgumentError(
        "PERSEUS_CPU_OPERATIONS=mpi needs the job to be started by mpirun (no "
        "OMPI_COMM_WORLD_RANK in the environment); start it with mpirun or perseusrun --mpi, or "
        "unset PERSEUS_CPU_OPERATIONS");
  }
}

// This bootstrap's store, under its prefixes, and the data plane's handshake secret.
struct JobStore {
  StoreConnection conn;
  transport::tcp::Secret secret;
  int incarnation = 0;  // Note [Re-initialisation]
  std::string again;    // "init<incarnation>" after the first bootstrap, else ""
};

// Connects to the store of this incarnation (Note [Re-initialisation]) and of this elastic
// epoch (Note [Epoch isolation]).
JobStore connectJobStore(LaunchInfo* info, const Params& params) {
  const int incarnation = params.store_prefix.empty() ? g_bootstraps.fetch_add(1) : 0;
  const std::string again = incarnation > 0 ? "init" + std::to_string(incarnation) : "";
  if (!again.empty()) {
    info->launch_id += "/" + again;
    // Alternate port ranges: a rank back first never knocks on the earlier store.
    if (info->derived_port != 0 && incarnation % 2 == 1) {
      info->derived_port += info->derived_port + 2 * kDerivedPortCandidates <= 65536
                                ? kDerivedPortCandidates
                                : -kDerivedPortCandidates;
    }
  }
  StoreConnection conn = connectStore(*info, params);
  auto secret = transport::tcp::Secret::fromHex(conn.secret_hex, "PERSEUS_SECRET");
  if (!again.empty()) {
    conn.store = std::make_unique<PrefixStore>(again + "/", std::move(conn.store));
  }
  if (!params.store_prefix.empty()) {
    // Note [Epoch isolation] (docs/elastic.md): this membership's keys live under its prefix,
    // and its data-plane handshakes use a key derived from it, so a rank of another epoch can
    // neither read these records nor pass a handshake with a rank of this one.
    conn.store = std::make_unique<PrefixStore>(params.store_prefix, std::move(conn.store));
    secret = secret.derive("data/" + params.store_prefix);
  }
  return JobStore{std::move(conn), std::move(secret), incarnation, again};
}

// The data plane's listening socket, on the address that reaches the store: the one the
// other ranks can reach too.
transport::tcp::TcpListener listenForPeers(const LaunchInfo& info, const Params& params) {
  const Topology& t = info.topology;
  const bool all_local = info.has_local && t.local_size == t.size;
  const bool store_named = !info.controller_host.empty();
  int port_lo = 0, port_hi = 0;
  parsePortRange(params.port_range, &port_lo, &port_hi);
  return transport::tcp::TcpListener(
      transport::tcp::chooseListenHost(
          params.iface, store_named ? info.controller_host : info.store_host,
          store_named ? info.controller_port : info.derived_port, all_local),
      port_lo, port_hi);
}

// Claims this rank, publishes its record (rank 0 first names the job, unless perseusrun did)
// and gathers every rank's.
std::vector<std::string> exchangeRecords(Store& store, const Topology& t,
                                         const std::string& address, const Params& params,
                                         Clock::time_point deadline) {
  // perseusrun names the job (PERSEUS_JOB_ID) so that it can remove exactly this job's
  // shared-memory segments if ranks die; otherwise rank 0 draws a name for everyone.
  if (t.rank == 0 && params.job_id.empty()) {
    uint8_t id[8];
    transport::tcp::fillRandom(id, sizeof(id));
    store.set("perseus/job_id", toBytes(transport::tcp::toHex(id, sizeof(id))));
  }
  if (store.add("perseus/claim/" + std::to_string(t.rank), 1) != 1) {
    throw InvalidArgumentError(PERSEUS_STR(
        "another process already joined this job as rank "
        << t.rank
        << "; every process needs "
           "its own PERSEUS_RANK (or OMPI_COMM_WORLD_RANK), and a job's store cannot be reused"));
  }
  store.set(rankKey(t.rank), toBytes(std::to_string(t.size) + "\n" + t.hostname + "\n" + address));
  return gatherRecords(store, t, params.start_timeout_s, !params.store_prefix.empty(), deadline);
}

// The name of the job's shared-memory segments.
std::string jobId(Store& store, const Params& params, const JobStore& job,
                  Clock::time_point deadline) {
  if (params.job_id.empty()) return fromBytes(store.get("perseus/job_id", until(deadline)));
  return params.job_id + (job.again.empty() ? "" : "-i" + std::to_string(job.incarnation));
}

// Reads every rank's record into t->hostnames; returns their data-plane addresses.
std::vector<std::string> readRecords(const std::vector<std::string>& records, Topology* t) {
  std::vector<std::string> addresses(t->size);
  t->hostnames.resize(t->size);
  for (int r = 0; r < t->size; ++r) {
    std::istringstream record(records[r]);
    std::string size_text;
    if (!std::getline(record, size_text) || !std::getline(record, t->hostnames[r]) ||
        !std::getline(record, addresses[r])) {
      throw MismatchError(
          PERSEUS_STR("rank " << r
                              << " published a malformed record in the "
                                 "rendezvous store; are all ranks running the same Perseus?"));
    }
    if (size_text != std::to_string(t->size)) {
      throw InvalidArgumentError(PERSEUS_STR("rank " << r << " was started with job size "
                                                     << size_text << " but rank " << t->rank
                                                     << " with " << t->size
                                                     << "; PERSEUS_SIZE (OMPI_COMM_WORLD_SIZE) "
                                                        "must be the same on every rank"));
    }
  }
  return addresses;
}

using Channels = std::vector<std::unique_ptr<transport::Channel>>;

// Shared-memory channels to the other ranks of this host; the arena goes to `world`. Returns
// the doorbell that those channels ring.
std::shared_ptr<transport::Doorbell> connectHostPeers(Store& store, const Topology& t,
                                                      const std::string& job_id,
                                                      const Params& params,
                                                      Clock::time_point deadline, World* world,
                                                      Channels* channels) {
  // The host's index among hosts keeps barrier keys of different hosts apart. Each local rank
  // sets its own key, so that a wait names the rank it waits for; in an elastic membership a
  // rank lost here ends the wait once perseusrun gives the membership up (waitForRank).
  const std::string host_key = "perseus/shm/" + std::to_string(t.local_ranks[0]) + "/";
  const bool abortable = !params.store_prefix.empty();
  int barrier_count = 0;
  auto local_barrier = [&] {
    const std::string key = host_key + std::to_string(barrier_count++) + "/";
    store.set(key + std::to_string(t.local_rank), {});
    for (int lr = 0; lr < t.local_size; ++lr) {
      if (lr == t.local_rank) continue;
      try {
        waitForRank(store, key + std::to_string(lr), t.local_ranks[lr], abortable, deadline);
      } catch (const TimeoutError&) {
        throw TimeoutError(PERSEUS_STR(
            "rank " << t.rank << ": rank " << t.local_ranks[lr] << " (local rank " << lr
                    << ") did not set up shared memory within PERSEUS_START_TIMEOUT="
                    << params.start_timeout_s << " s; see that rank's log or exit status"));
      }
    }
  };
  auto group = transport::shm::createShmLocalGroup(job_id, t.local_rank, t.local_ranks, params,
                                                   local_barrier);
  for (auto& [peer, channel] : group->channels) (*channels)[peer] = std::move(channel);
  world->arena = std::move(group->arena);
  return group->doorbell;
}

// Authenticated TCP channels to every rank that has none yet; returns how many.
size_t connectTcpPeers(const Topology& t, const std::vector<std::string>& addresses,
                       transport::tcp::TcpListener& listener, const transport::tcp::Secret& secret,
                       const Params& params, Clock::time_point deadline, Channels* channels) {
  std::map<int, transport::tcp::SockAddr> tcp_peers;
  for (int r = 0; r < t.size; ++r) {
    if (r == t.rank || (*channels)[r]) continue;
    tcp_peers[r] =
        transport::tcp::SockAddr::parse(addresses[r], "address of rank " + std::to_string(r));
  }
  if (tcp_peers.empty()) return 0;
  transport::tcp::MeshOptions options;
  options.connections = static_cast<int>(params.tcp_connections);
  options.deadline = deadline;
  if (options.connections < 1 || options.connections > 64) {
    throw InvalidArgumentError(PERSEUS_STR(
        "PERSEUS_TCP_CONNECTIONS=" << params.tcp_connections << " must be between 1 and 64"));
  }
  auto tcp = transport::tcp::connectTcpPeers(t.rank, listener, tcp_peers, secret, options);
  for (auto& [peer, channel] : tcp) (*channels)[peer] = std::move(channel);
  return tcp_peers.size();
}

}  // namespace

std::unique_ptr<World> bootstrap(const Params& params) {
  LaunchInfo info = readLaunchInfo([](const char* name) { return std::getenv(name); });
  logging::setRank(info.topology.rank);
  if (!info.warning.empty()) {
    PERSEUS_LOG(WARNING, kRendezvous) << info.warning;
  }
  const bool use_mpi = params.cpu_operations == "mpi";
  checkMpiLauncher(info, use_mpi);
  if (info.topology.size == 1) return singleRank(info, params);

  const auto deadline =
      Clock::now() + milliseconds(static_cast<int64_t>(params.start_timeout_s * 1000));
  JobStore job = connectJobStore(&info, params);
  Store& store = *job.conn.store;

  auto world = std::make_unique<World>();
  Topology& t = world->topology;
  t = info.topology;
  transport::tcp::TcpListener listener = listenForPeers(info, params);
  std::vector<std::string> records =
      exchangeRecords(store, t, listener.address().str(), params, deadline);
  const std::string job_id = jobId(store, params, job, deadline);
  if (job.conn.after_rendezvous) job.conn.after_rendezvous();
  const std::vector<std::string> addresses = readRecords(records, &t);
  derivePlacement(&t);
  reconcilePlacement(info, &t);
  // Before the shared-memory group: each rank publishes there the CPUs it may run on, and the
  // host's ranks size their spinning and reduce threads by all of them.
  if (params.bind_to == "core") bindRank(t);

  Channels channels(t.size);
  std::shared_ptr<transport::Doorbell> doorbell;
  const bool use_shm = params.cpu_operations != "tcp" && !use_mpi && t.local_size > 1;
  if (use_mpi) channels = transport::mpi::connectMpiPeers(t.rank, t.size, params);
  if (use_shm) {
    doorbell = connectHostPeers(store, t, job_id, params, deadline, world.get(), &channels);
  }
  const size_t tcp_peers =
      connectTcpPeers(t, addresses, listener, job.secret, params, deadline, &channels);
  PERSEUS_LOG(INFO, kRendezvous) << "rank " << t.rank << "/" << t.size << " on " << t.hostname
                                 << ": local " << t.local_rank << "/" << t.local_size << ", cross "
                                 << t.cross_rank << "/" << t.cross_size << ", "
                                 << (use_shm ? t.local_size - 1 : 0) << " shm and " << tcp_peers
                                 << " TCP peers" << (use_mpi ? ", MPI" : "");
  world->transport =
      std::make_unique<transport::ChannelTransport>(t.rank, std::move(channels), params, doorbell);
  world->store = std::move(job.conn.store);
  return world;
}

}  // namespace perseus::rendezvous
