#include "rendezvous/launch_env.h"

#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>

#include "common/status.h"
#include "rendezvous/slurm_lists.h"

// Note [Launchers]
// The first launcher whose variables are present wins:
//  1. perseusrun: PERSEUS_RANK/SIZE (+ LOCAL_*, CROSS_*, HOSTNAME, CONTROLLER_ADDR/PORT, SECRET).
//  2. Open MPI's mpirun: OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE (PERSEUS_CONTROLLER_*
//     and PERSEUS_SECRET still win if set). Store: Note [Store discovery].
//  3. Hydra, the mpiexec of MPICH and of Intel MPI: PMI_RANK/PMI_SIZE with MPI_LOCALRANKID/
//     MPI_LOCALNRANKS, and PMI_FD, on which rank 0 publishes the store (Note [PMI wire]).
//  4. torchrun, or anything else that sets torch.distributed's variables (a Kubeflow
//     PyTorchJob): RANK/WORLD_SIZE, LOCAL_RANK/LOCAL_WORLD_SIZE, MASTER_ADDR/MASTER_PORT.
//     Rank 0 serves the store on MASTER_ADDR, one port above torch's own (MASTER_PORT).
//  5. horovodrun 0.28 in Gloo mode: HOROVOD_RANK/SIZE/LOCAL_*/CROSS_*/HOSTNAME and
//     HOROVOD_GLOO_RENDEZVOUS_ADDR/PORT, its HTTP key-value server, through which rank 0 hands
//     out the store (Note [horovodrun rendezvous]). Its MPI mode runs mpirun, so 2. or 3.
//     applies; its elastic mode (HOROVOD_ELASTIC) is refused with the perseusrun line.
//  6. Slurm's srun: SLURM_PROCID, SLURM_STEP_NUM_TASKS, SLURM_LOCALID, SLURM_NODEID,
//     SLURM_STEP_TASKS_PER_NODE, SLURM_STEP_NODELIST. Rank 0 serves the store on the step's
//     first node (where srun's block placement puts task 0).
// The order matters where launchers nest: mpiexec, mpirun, torchrun and horovodrun started
// inside a Slurm allocation or by srun see SLURM_* too, but those describe the launcher's own
// step. A batch
// script (no step of its own) is one process. torchrun and srun hand out no secret, so those
// jobs need PERSEUS_SECRET or PERSEUS_SECRET_FILE (job_secret.h).
// A process that some launcher says is one of several but that Perseus cannot join (a PMIx
// rank with no job size, Hydra without PMI_FD, torchrun variables without MASTER_ADDR) is an
// InvalidArgumentError naming the launcher and the variables seen, never a size-1 job. Variables
// that announce several processes but are legitimately seen by one (a Slurm batch script's
// SLURM_NTASKS, bare PMI_RANK/PMI_SIZE) leave a single rank with one warning (LaunchInfo::warning).
// No launcher variable at all: a single rank.

namespace perseus::rendezvous {
namespace {

const char* lookupNonEmpty(const EnvLookup& lookup, const char* name) {
  const char* v = lookup(name);
  return (v != nullptr && *v != '\0') ? v : nullptr;
}

// Every variable of every launcher, so that a message can show what this process was given.
const char* const kLauncherVariables[] = {"PERSEUS_RANK",
                                          "PERSEUS_SIZE",
                                          "OMPI_COMM_WORLD_RANK",
                                          "OMPI_COMM_WORLD_SIZE",
                                          "OMPI_COMM_WORLD_LOCAL_RANK",
                                          "OMPI_COMM_WORLD_LOCAL_SIZE",
                                          "PMI_RANK",
                                          "PMI_SIZE",
                                          "PMI_FD",
                                          "PMI_PORT",
                                          "PMI_JOBID",
                                          "MPI_LOCALRANKID",
                                          "MPI_LOCALNRANKS",
                                          "PMIX_RANK",
                                          "PMIX_NAMESPACE",
                                          "RANK",
                                          "WORLD_SIZE",
                                          "LOCAL_RANK",
                                          "LOCAL_WORLD_SIZE",
                                          "GROUP_RANK",
                                          "MASTER_ADDR",
                                          "MASTER_PORT",
                                          "TORCHELASTIC_RUN_ID",
                                          "SLURM_JOB_ID",
                                          "SLURM_STEP_ID",
                                          "SLURM_PROCID",
                                          "SLURM_STEP_NUM_TASKS",
                                          "SLURM_NTASKS",
                                          "SLURM_LOCALID",
                                          "SLURM_NODEID",
                                          "SLURM_STEP_TASKS_PER_NODE",
                                          "SLURM_TASKS_PER_NODE",
                                          "SLURM_NTASKS_PER_NODE",
                                          "SLURM_STEP_NODELIST",
                                          "SLURM_JOB_NODELIST",
                                          "HOROVOD_RANK",
                                          "HOROVOD_SIZE",
                                          "HOROVOD_CONTROLLER",
                                          "HOROVOD_ELASTIC",
                                          "HOROVOD_GLOO_RENDEZVOUS_ADDR",
                                          "HOROVOD_GLOO_RENDEZVOUS_PORT"};

std::string seenVariables(const EnvLookup& lookup) {
  std::ostringstream out;
  for (const char* name : kLauncherVariables) {
    if (const char* v = lookupNonEmpty(lookup, name)) {
      out << (out.tellp() > 0 ? ", " : "") << name << "=" << v;
    }
  }
  return out.tellp() > 0 ? out.str() : std::string("none");
}

// Errors say which launcher's variables were read and what this process saw.
class Reader {
 public:
  explicit Reader(const EnvLookup& lookup) : lookup_(lookup), seen_(seenVariables(lookup)) {}

  const char* get(const char* name) const { return lookupNonEmpty(lookup_, name); }
  const std::string& seen() const { return seen_; }
  void setLauncher(Launcher l) { launcher_ = l; }

  [[noreturn]] void fail(const std::string& what) const {
    std::ostringstream msg;
    if (launcher_ != Launcher::kSingle) msg << "started by " << launcherName(launcher_) << ": ";
    msg << what << " (launcher variables seen: " << seen_ << ")";
    throw InvalidArgumentError(msg.str());
  }

  int parseInt(const char* name, const char* text, long min_value, long max_value) const {
    errno = 0;
    char* end = nullptr;
    long v = std::strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || v < min_value || v > max_value) {
      fail(PERSEUS_STR(name << "='" << text << "' is not an integer in " << min_value << ".."
                            << max_value << "; the launcher sets it, check the job script"));
    }
    return static_cast<int>(v);
  }

  // Reads a (rank, size) pair that must come together.
  bool readPair(const char* rank_var, const char* size_var, int* rank, int* size) const {
    const char* r = get(rank_var);
    const char* s = get(size_var);
    if (r == nullptr && s == nullptr) return false;
    if (r == nullptr || s == nullptr) {
      fail(PERSEUS_STR((r == nullptr ? rank_var : size_var)
                       << " is missing while " << (r == nullptr ? size_var : rank_var)
                       << " is set; set both or neither"));
    }
    *size = parseInt(size_var, s, 1, INT_MAX);
    *rank = parseInt(rank_var, r, 0, *size - 1);
    return true;
  }

  void readLocal(LaunchInfo* info, const char* rank_var, const char* size_var) const {
    Topology& t = info->topology;
    info->has_local = readPair(rank_var, size_var, &t.local_rank, &t.local_size);
    if (!info->has_local) return;
    if (t.local_size > t.size) {
      fail(PERSEUS_STR(size_var << "=" << t.local_size << " exceeds the job size " << t.size));
    }
    info->local_rank_var = rank_var;
    info->local_size_var = size_var;
  }

  void readCross(LaunchInfo* info, const char* rank_var, const char* size_var) const {
    Topology& t = info->topology;
    info->has_cross = readPair(rank_var, size_var, &t.cross_rank, &t.cross_size);
    if (!info->has_cross) return;
    if (t.cross_size > t.size) {
      fail(PERSEUS_STR(size_var << "=" << t.cross_size << " exceeds the job size " << t.size));
    }
    info->cross_rank_var = rank_var;
    info->cross_size_var = size_var;
  }

 private:
  const EnvLookup& lookup_;
  std::string seen_;
  Launcher launcher_ = Launcher::kSingle;
};

std::string localHostname() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

// This process's command line ("python3 train.py --lr 0.1"), for a launch line to suggest.
std::string thisCommand() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string out;
  std::string arg;
  std::istringstream args(raw);
  while (std::getline(args, arg, '\0')) {
    std::string quoted = arg;
    if (arg.empty() || arg.find_first_of(" \t\n'\"$`\\;&|<>()*?") != std::string::npos) {
      quoted = "'";  // POSIX shell quoting: a ' inside becomes '\''
      for (char c : arg) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
      quoted += "'";
    }
    out += (out.empty() ? "" : " ") + quoted;
  }
  return out.empty() ? "<your command>" : out;
}

bool readOpenMpi(const Reader& env, LaunchInfo* info) {
  Topology& t = info->topology;
  if (!env.readPair("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", &t.rank, &t.size)) return false;
  env.readLocal(info, "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE");
  if (const char* id = env.get("OMPI_MCA_ess_base_jobid")) {
    info->ompi_job_id = id;
  } else if (const char* ns = env.get("PMIX_NAMESPACE")) {
    info->ompi_job_id = ns;
  }
  return true;
}

bool readHydra(const Reader& env, LaunchInfo* info) {
  if (env.get("MPI_LOCALRANKID") == nullptr && env.get("MPI_LOCALNRANKS") == nullptr) return false;
  Topology& t = info->topology;
  if (!env.readPair("PMI_RANK", "PMI_SIZE", &t.rank, &t.size)) {
    env.fail(
        "MPI_LOCALRANKID/MPI_LOCALNRANKS are set but PMI_RANK/PMI_SIZE are not; start "
        "the job with mpiexec (Hydra) unchanged, or with perseusrun");
  }
  env.readLocal(info, "MPI_LOCALRANKID", "MPI_LOCALNRANKS");
  if (t.size > 1) {
    const char* fd = env.get("PMI_FD");
    if (fd == nullptr) {
      env.fail(
          "PMI_FD is not set, so the ranks cannot share the rendezvous store's address. "
          "Hydra gives it to every process it starts, unless MPICH's mpiexec runs with "
          "-pmi-port (PMI_PORT) or something between mpiexec and Python cleared the "
          "environment (env -i, sudo, a container runtime); run Python directly under "
          "mpiexec (MPICH: without -pmi-port), or start the job with perseusrun");
    }
    info->pmi_fd = env.parseInt("PMI_FD", fd, 0, INT_MAX);
  }
  return true;
}

bool readTorchrun(const Reader& env, LaunchInfo* info) {
  Topology& t = info->topology;
  if (!env.readPair("RANK", "WORLD_SIZE", &t.rank, &t.size)) {
    if (env.get("LOCAL_RANK") != nullptr && env.get("LOCAL_WORLD_SIZE") != nullptr) {
      env.fail(
          "LOCAL_RANK/LOCAL_WORLD_SIZE are set but RANK/WORLD_SIZE are not; start the "
          "job with torchrun, or set RANK and WORLD_SIZE too");
    }
    return false;
  }
  env.readLocal(info, "LOCAL_RANK", "LOCAL_WORLD_SIZE");
  if (t.size == 1) return true;
  const char* addr = env.get("MASTER_ADDR");
  const char* port = env.get("MASTER_PORT");
  if (addr == nullptr || port == nullptr) {
    env.fail(
        "WORLD_SIZE > 1 but MASTER_ADDR/MASTER_PORT are not both set, so the ranks "
        "cannot find rank 0; set them (torchrun and a PyTorchJob do), or start the job "
        "with perseusrun");
  }
  info->store_host = addr;
  const int master_port = env.parseInt("MASTER_PORT", port, 1, 65535);
  info->derived_port = master_port < 65535 ? master_port + 1 : master_port - 1;
  std::ostringstream id;
  id << "torch/" << (env.get("TORCHELASTIC_RUN_ID") ? env.get("TORCHELASTIC_RUN_ID") : "-") << "/"
     << addr << ":" << master_port << "/"
     << (env.get("TORCHELASTIC_RESTART_COUNT") ? env.get("TORCHELASTIC_RESTART_COUNT") : "0");
  info->launch_id = id.str();
  return true;
}

// horovodrun 0.28 in Gloo mode (horovod/runner/gloo_run.py): the placement in HOROVOD_*, and
// the address of its HTTP rendezvous server, through which rank 0 hands out the store.
bool readHorovodrun(const Reader& env, LaunchInfo* info) {
  Topology& t = info->topology;
  if (!env.readPair("HOROVOD_RANK", "HOROVOD_SIZE", &t.rank, &t.size)) return false;
  env.readLocal(info, "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE");
  env.readCross(info, "HOROVOD_CROSS_RANK", "HOROVOD_CROSS_SIZE");
  if (const char* host = env.get("HOROVOD_HOSTNAME")) t.hostname = host;
  if (t.size == 1) return true;
  const std::string perseusrun_line =
      PERSEUS_STR("perseusrun -np " << t.size << " " << thisCommand());
  if (env.get("HOROVOD_ELASTIC") != nullptr) {
    env.fail(
        "horovodrun's elastic mode (HOROVOD_ELASTIC=1) assigns ranks through its own "
        "driver, which Perseus cannot follow; perseusrun takes the same flags "
        "(--min-np, --max-np, --host-discovery-script), so start the elastic job as: " +
        perseusrun_line);
  }
  const char* addr = env.get("HOROVOD_GLOO_RENDEZVOUS_ADDR");
  const char* port = env.get("HOROVOD_GLOO_RENDEZVOUS_PORT");
  if (addr == nullptr || port == nullptr) {
    env.fail(
        "HOROVOD_SIZE > 1 but HOROVOD_GLOO_RENDEZVOUS_ADDR/_PORT are not both set, so the "
        "ranks cannot find each other (horovodrun sets them in Gloo mode); perseusrun "
        "takes horovodrun's flags, so run the same job as: " +
        perseusrun_line);
  }
  info->store_host = addr;
  info->http_port = env.parseInt("HOROVOD_GLOO_RENDEZVOUS_PORT", port, 1, 65535);
  info->launch_id = PERSEUS_STR("horovodrun/" << addr << ":" << info->http_port);
  return true;
}

// A step (srun) has SLURM_STEP_NUM_TASKS; a batch script or an salloc shell does not.
bool readSlurm(const Reader& env, LaunchInfo* info) {
  const char* procid = env.get("SLURM_PROCID");
  const char* ntasks = env.get("SLURM_STEP_NUM_TASKS");
  if (procid == nullptr || ntasks == nullptr) return false;
  Topology& t = info->topology;
  t.size = env.parseInt("SLURM_STEP_NUM_TASKS", ntasks, 1, INT_MAX);
  t.rank = env.parseInt("SLURM_PROCID", procid, 0, t.size - 1);
  if (const char* node = env.get("SLURMD_NODENAME")) t.hostname = node;
  const char* localid = env.get("SLURM_LOCALID");
  const char* nodeid = env.get("SLURM_NODEID");
  const char* per_node = env.get("SLURM_STEP_TASKS_PER_NODE");
  const char* per_node_var = "SLURM_STEP_TASKS_PER_NODE";
  if (per_node == nullptr) {
    per_node = env.get("SLURM_TASKS_PER_NODE");
    per_node_var = "SLURM_TASKS_PER_NODE";
  }
  if (localid != nullptr && nodeid != nullptr && per_node != nullptr) {
    const int node = env.parseInt("SLURM_NODEID", nodeid, 0, INT_MAX);
    const std::vector<int> counts = expandTasksPerNode(per_node, per_node_var);
    if (node >= static_cast<int>(counts.size())) {
      env.fail(PERSEUS_STR("SLURM_NODEID=" << node << " but " << per_node_var << "='" << per_node
                                           << "' lists " << counts.size() << " nodes"));
    }
    t.local_size = counts[node];
    t.local_rank = env.parseInt("SLURM_LOCALID", localid, 0, t.local_size - 1);
    info->has_local = true;
    info->local_rank_var = "SLURM_LOCALID";
    info->local_size_var = per_node_var;
    if (t.rank == 0 && node != 0) {
      env.fail("task 0 runs on node " + std::to_string(node) +
               " of the step, not on its first "
               "node where the ranks look for the store; use srun's default (block) "
               "distribution, or set PERSEUS_CONTROLLER_ADDR");
    }
  }
  if (t.size == 1) return true;
  const char* nodes = env.get("SLURM_STEP_NODELIST");
  const char* nodes_var = "SLURM_STEP_NODELIST";
  if (nodes == nullptr) {
    nodes = env.get("SLURM_JOB_NODELIST");
    nodes_var = "SLURM_JOB_NODELIST";
  }
  if (nodes == nullptr) {
    env.fail(
        "SLURM_STEP_NUM_TASKS > 1 but SLURM_STEP_NODELIST is not set, so the ranks cannot "
        "find the first node; run the job with srun");
  }
  info->store_host = expandHostList(nodes, nodes_var).front();
  const char* job = env.get("SLURM_JOB_ID");
  const char* step = env.get("SLURM_STEP_ID");
  const long job_id = job ? std::strtol(job, nullptr, 10) : 0;
  const long step_id = step ? std::strtol(step, nullptr, 10) : 0;
  // Below Linux's ephemeral ports (32768+) and torch's default 29500; jobs and steps spread.
  info->derived_port = 20000 + static_cast<int>((job_id * 16 + step_id) % 9000);
  info->launch_id = PERSEUS_STR("slurm/" << (job ? job : "-") << "." << (step ? step : "-"));
  return true;
}

int announcedSize(const Reader& env, const char* name) {
  const char* v = env.get(name);
  return v == nullptr ? 0 : static_cast<int>(std::strtol(v, nullptr, 10));
}

// No launcher Perseus can join, but hints of several processes: a warning.
void checkAlone(const Reader& env, LaunchInfo* info) {
  const int slurm_tasks = announcedSize(env, "SLURM_NTASKS");
  if (slurm_tasks > 1 && env.get("SLURM_PROCID") != nullptr) {
    info->warning = PERSEUS_STR(
        "SLURM_NTASKS=" << slurm_tasks << " but this process is not a task of a job step "
                        << "(no SLURM_STEP_NUM_TASKS), so it runs alone as rank 0 of 1. To "
                        << "train on the allocation's " << slurm_tasks << " tasks, run: srun "
                        << thisCommand() << " (or perseusrun " << thisCommand() << ")");
    return;
  }
  const int pmi_size = announcedSize(env, "PMI_SIZE");
  if (pmi_size > 1 && env.get("PMI_RANK") != nullptr) {
    info->warning = PERSEUS_STR(
        "PMI_RANK=" << env.get("PMI_RANK") << " and PMI_SIZE=" << pmi_size
                    << " are set without MPI_LOCALRANKID/MPI_LOCALNRANKS or PMI_FD, so no "
                    << "launcher Perseus can join started this process and it runs alone as "
                    << "rank 0 of 1. Run: mpiexec -n " << pmi_size << " " << thisCommand()
                    << " (or perseusrun -np " << pmi_size << " " << thisCommand() << ")");
  }
}

}  // namespace

const char* launcherName(Launcher launcher) {
  switch (launcher) {
    case Launcher::kSingle:
      return "no launcher";
    case Launcher::kPerseus:
      return "perseusrun";
    case Launcher::kOpenMpi:
      return "Open MPI's mpirun";
    case Launcher::kHydra:
      return "MPICH's (or Intel MPI's) mpiexec";
    case Launcher::kTorchrun:
      return "torchrun";
    case Launcher::kHorovodrun:
      return "horovodrun";
    case Launcher::kSlurm:
      return "Slurm's srun";
  }
  return "an unknown launcher";
}

LaunchInfo readLaunchInfo(const EnvLookup& lookup) {
  LaunchInfo info;
  Topology& t = info.topology;
  Reader env(lookup);
  info.seen = env.seen();
  const char* host = env.get("PERSEUS_HOSTNAME");
  t.hostname = host != nullptr ? host : localHostname();

  // Each reader returns false when its launcher's variables are absent.
  struct Candidate {
    Launcher launcher;
    bool (*read)(const Reader&, LaunchInfo*);
  };
  auto readPerseus = [](const Reader& e, LaunchInfo* i) {
    if (!e.readPair("PERSEUS_RANK", "PERSEUS_SIZE", &i->topology.rank, &i->topology.size)) {
      return false;
    }
    e.readLocal(i, "PERSEUS_LOCAL_RANK", "PERSEUS_LOCAL_SIZE");
    e.readCross(i, "PERSEUS_CROSS_RANK", "PERSEUS_CROSS_SIZE");
    return true;
  };
  const Candidate candidates[] = {
      {Launcher::kPerseus, readPerseus},       {Launcher::kOpenMpi, readOpenMpi},
      {Launcher::kHydra, readHydra},           {Launcher::kTorchrun, readTorchrun},
      {Launcher::kHorovodrun, readHorovodrun}, {Launcher::kSlurm, readSlurm}};
  for (const auto& c : candidates) {
    env.setLauncher(c.launcher);
    LaunchInfo attempt = info;
    if (c.read(env, &attempt)) {
      info = attempt;
      info.launcher = c.launcher;
      break;
    }
  }
  env.setLauncher(info.launcher);
  if (host != nullptr) t.hostname = host;  // PERSEUS_HOSTNAME wins over SLURMD_NODENAME

  if (info.launcher == Launcher::kSingle) checkAlone(env, &info);
  if (info.launcher == Launcher::kSingle && env.get("PMIX_RANK") != nullptr) {
    env.fail(
        "this process was started by a PMIx launcher (PMIX_RANK is set) that gives no job "
        "size Perseus can read, so it would run alone; start it with perseusrun, mpirun, "
        "srun (without --mpi=pmix if that is what set it) or torchrun, or set "
        "PERSEUS_RANK/PERSEUS_SIZE, PERSEUS_CONTROLLER_ADDR/_PORT and PERSEUS_SECRET");
  }

  if (const char* addr = env.get("PERSEUS_CONTROLLER_ADDR")) {
    info.controller_host = addr;
    const char* port = env.get("PERSEUS_CONTROLLER_PORT");
    if (port == nullptr) {
      env.fail("PERSEUS_CONTROLLER_ADDR is set but PERSEUS_CONTROLLER_PORT is not; set both");
    }
    info.controller_port = env.parseInt("PERSEUS_CONTROLLER_PORT", port, 1, 65535);
  }
  if (const char* secret = env.get("PERSEUS_SECRET")) info.secret_hex = secret;

  if (info.launcher == Launcher::kPerseus && t.size > 1 && info.controller_host.empty()) {
    env.fail(
        "PERSEUS_SIZE > 1 but PERSEUS_CONTROLLER_ADDR is not set; start the job with "
        "perseusrun, or set PERSEUS_CONTROLLER_ADDR/_PORT to a running store server");
  }
  if (!info.controller_host.empty() && info.secret_hex.empty()) {
    env.fail(
        "PERSEUS_SECRET is not set; every connection is authenticated with the job secret "
        "(hex), which perseusrun sets for each rank");
  }
  return info;
}

}  // namespace perseus::rendezvous
