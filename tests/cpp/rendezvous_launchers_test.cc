// The launchers other than perseusrun (Note [Launchers]): their variables exactly as torchrun,
// srun and Hydra's mpiexec set them, Slurm's compressed lists, the loud failures, the user's
// secret, and forked ranks that form one job from torchrun's and srun's variables alone.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>

#include "common/params.h"
#include "common/status.h"
#include "rendezvous/job_secret.h"
#include "rendezvous/launch_env.h"
#include "rendezvous/slurm_lists.h"
#include "rendezvous/world.h"
#include "support/forked_ranks.h"

namespace perseus::rendezvous {
namespace {

using namespace std::chrono_literals;
using Env = std::map<std::string, std::string>;

LaunchInfo read(const Env& env) {
  return readLaunchInfo([&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

// The message of the InvalidArgumentError that reading `env` raises ("" if none).
std::string failure(const Env& env) {
  try {
    read(env);
  } catch (const InvalidArgumentError& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(SlurmLists, ExpandsHostLists) {
  using V = std::vector<std::string>;
  EXPECT_EQ(expandHostList("node[01-04,07]", "L"),
            (V{"node01", "node02", "node03", "node04", "node07"}));
  EXPECT_EQ(expandHostList("a,b[8-10],c", "L"), (V{"a", "b8", "b9", "b10", "c"}));
  EXPECT_EQ(expandHostList("r[1-2]-n[1,3]", "L"), (V{"r1-n1", "r1-n3", "r2-n1", "r2-n3"}));
  EXPECT_EQ(expandHostList("gpu-a[009-011]-ib", "L"),
            (V{"gpu-a009-ib", "gpu-a010-ib", "gpu-a011-ib"}));
  EXPECT_EQ(expandHostList("solo", "L"), (V{"solo"}));
  for (const char* bad : {"node[01-04", "node]1[", "n[a-b]", "n[4-2]", "a,,b", ""}) {
    EXPECT_THROW(expandHostList(bad, "SLURM_STEP_NODELIST"), InvalidArgumentError) << bad;
  }
  try {
    expandHostList("node[1-", "SLURM_STEP_NODELIST");
  } catch (const InvalidArgumentError& e) {
    EXPECT_TRUE(contains(e.what(), "SLURM_STEP_NODELIST='node[1-'")) << e.what();
  }
}

TEST(SlurmLists, ExpandsTasksPerNode) {
  EXPECT_EQ(expandTasksPerNode("2(x3),1", "T"), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(expandTasksPerNode("4", "T"), (std::vector<int>{4}));
  EXPECT_EQ(expandTasksPerNode("1,3", "T"), (std::vector<int>{1, 3}));
  for (const char* bad : {"2(3)", "x", "2(x)", "2(xa)", ""}) {
    EXPECT_THROW(expandTasksPerNode(bad, "T"), InvalidArgumentError) << bad;
  }
}

// What torchrun --nnodes 2 --nproc-per-node 2 hands rank 3 (torch 2.x's local_elastic_agent).
Env torchrunRank3() {
  return {{"RANK", "3"},
          {"WORLD_SIZE", "4"},
          {"LOCAL_RANK", "1"},
          {"LOCAL_WORLD_SIZE", "2"},
          {"GROUP_RANK", "1"},
          {"GROUP_WORLD_SIZE", "2"},
          {"ROLE_RANK", "3"},
          {"MASTER_ADDR", "node01"},
          {"MASTER_PORT", "29500"},
          {"TORCHELASTIC_RUN_ID", "job7"},
          {"TORCHELASTIC_RESTART_COUNT", "0"}};
}

// What srun -N 2 --ntasks-per-node 2 hands task 2 (Slurm 22.05).
Env srunTask2() {
  return {{"SLURM_JOB_ID", "41"},
          {"SLURM_STEP_ID", "0"},
          {"SLURM_PROCID", "2"},
          {"SLURM_STEP_NUM_TASKS", "4"},
          {"SLURM_NTASKS", "4"},
          {"SLURM_LOCALID", "0"},
          {"SLURM_NODEID", "1"},
          {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"},
          {"SLURM_TASKS_PER_NODE", "2(x2)"},
          {"SLURM_STEP_NODELIST", "node[01-02]"},
          {"SLURM_JOB_NODELIST", "node[01-02]"},
          {"SLURMD_NODENAME", "node02"}};
}

TEST(LaunchEnv, Torchrun) {
  LaunchInfo info = read(torchrunRank3());
  EXPECT_EQ(info.launcher, Launcher::kTorchrun);
  EXPECT_EQ(info.topology.rank, 3);
  EXPECT_EQ(info.topology.size, 4);
  EXPECT_TRUE(info.has_local);
  EXPECT_EQ(info.topology.local_rank, 1);
  EXPECT_EQ(info.topology.local_size, 2);
  EXPECT_EQ(info.store_host, "node01");
  EXPECT_EQ(info.derived_port, 29501);  // next to torch's own store, never on it
  EXPECT_TRUE(contains(info.launch_id, "job7")) << info.launch_id;

  // A PyTorchJob without torchrun in the pod: one process per pod, no LOCAL_*.
  Env pod = {{"RANK", "1"},
             {"WORLD_SIZE", "2"},
             {"MASTER_ADDR", "job-master-0"},
             {"MASTER_PORT", "23456"}};
  info = read(pod);
  EXPECT_EQ(info.launcher, Launcher::kTorchrun);
  EXPECT_FALSE(info.has_local);
  EXPECT_EQ(info.store_host, "job-master-0");

  Env no_master = torchrunRank3();
  no_master.erase("MASTER_ADDR");
  const std::string msg = failure(no_master);
  EXPECT_TRUE(contains(msg, "torchrun")) << msg;
  EXPECT_TRUE(contains(msg, "MASTER_ADDR")) << msg;
  EXPECT_TRUE(contains(msg, "WORLD_SIZE=4")) << msg;  // the variables seen
  Env half = {{"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "2"}};
  EXPECT_TRUE(contains(failure(half), "RANK/WORLD_SIZE")) << failure(half);
}

// What horovodrun 0.28 (Gloo mode) gives rank 3 of -np 4 -H a:2,b:2 (gloo_run.py).
Env horovodrunRank3() {
  return {{"HOROVOD_RANK", "3"},
          {"HOROVOD_SIZE", "4"},
          {"HOROVOD_LOCAL_RANK", "1"},
          {"HOROVOD_LOCAL_SIZE", "2"},
          {"HOROVOD_CROSS_RANK", "1"},
          {"HOROVOD_CROSS_SIZE", "2"},
          {"HOROVOD_HOSTNAME", "b"},
          {"HOROVOD_CONTROLLER", "gloo"},
          {"HOROVOD_CPU_OPERATIONS", "gloo"},
          {"HOROVOD_GLOO_RENDEZVOUS_ADDR", "10.0.0.1"},
          {"HOROVOD_GLOO_RENDEZVOUS_PORT", "8559"},
          {"SLURM_PROCID", "0"},
          {"SLURM_STEP_NUM_TASKS", "1"}};  // horovodrun inside a one-task srun step
}

TEST(LaunchEnv, Horovodrun) {
  LaunchInfo info = read(horovodrunRank3());
  EXPECT_EQ(info.launcher, Launcher::kHorovodrun);
  EXPECT_EQ(info.topology.rank, 3);
  EXPECT_EQ(info.topology.size, 4);
  EXPECT_EQ(info.topology.local_rank, 1);
  EXPECT_EQ(info.topology.cross_rank, 1);
  EXPECT_EQ(info.cross_size_var, "HOROVOD_CROSS_SIZE");
  EXPECT_EQ(info.topology.hostname, "b");  // horovodrun's name, as its placement uses
  EXPECT_EQ(info.store_host, "10.0.0.1");
  EXPECT_EQ(info.http_port, 8559);
  EXPECT_EQ(info.derived_port, 0);

  Env elastic = horovodrunRank3();
  elastic["HOROVOD_ELASTIC"] = "1";
  std::string msg = failure(elastic);
  EXPECT_TRUE(contains(msg, "elastic mode")) << msg;
  EXPECT_TRUE(contains(msg, "perseusrun -np 4 ")) << msg;
  Env bare = horovodrunRank3();
  bare.erase("HOROVOD_GLOO_RENDEZVOUS_PORT");
  msg = failure(bare);
  EXPECT_TRUE(contains(msg, "HOROVOD_GLOO_RENDEZVOUS_ADDR/_PORT")) << msg;
  EXPECT_TRUE(contains(msg, "perseusrun -np 4 ")) << msg;
}

TEST(LaunchEnv, Slurm) {
  LaunchInfo info = read(srunTask2());
  EXPECT_EQ(info.launcher, Launcher::kSlurm);
  EXPECT_EQ(info.topology.rank, 2);
  EXPECT_EQ(info.topology.size, 4);
  EXPECT_EQ(info.topology.local_rank, 0);
  EXPECT_EQ(info.topology.local_size, 2);
  EXPECT_EQ(info.topology.hostname, "node02");  // SLURMD_NODENAME
  EXPECT_EQ(info.store_host, "node01");         // the step's first node
  EXPECT_GE(info.derived_port, 20000);
  EXPECT_LT(info.derived_port, 29000);
  Env other_step = srunTask2();
  other_step["SLURM_STEP_ID"] = "1";
  EXPECT_NE(read(other_step).derived_port, info.derived_port);
  EXPECT_NE(read(other_step).launch_id, info.launch_id);

  // Uneven steps: srun -n 5 over 2 nodes puts 3 on the first.
  Env uneven = srunTask2();
  uneven["SLURM_STEP_NUM_TASKS"] = "5";
  uneven["SLURM_PROCID"] = "4";
  uneven["SLURM_LOCALID"] = "1";
  uneven["SLURM_STEP_TASKS_PER_NODE"] = "3,2";
  info = read(uneven);
  EXPECT_EQ(info.topology.local_size, 2);
  EXPECT_EQ(info.local_size_var, "SLURM_STEP_TASKS_PER_NODE");

  // A batch script or an salloc shell is no step: one process.
  Env batch = {{"SLURM_JOB_ID", "41"},
               {"SLURM_PROCID", "0"},
               {"SLURM_NTASKS", "4"},
               {"SLURM_JOB_NODELIST", "node[01-02]"},
               {"SLURM_TASKS_PER_NODE", "2(x2)"}};
  EXPECT_EQ(read(batch).launcher, Launcher::kSingle);

  Env bad = srunTask2();
  bad["SLURM_STEP_NODELIST"] = "node[01-02";
  EXPECT_TRUE(contains(failure(bad), "SLURM_STEP_NODELIST")) << failure(bad);
  Env cyclic = srunTask2();
  cyclic["SLURM_PROCID"] = "0";
  EXPECT_TRUE(contains(failure(cyclic), "first node")) << failure(cyclic);
}

TEST(LaunchEnv, HydraAndPmix) {
  Env hydra = {{"PMI_RANK", "1"},        {"PMI_SIZE", "2"},        {"PMI_FD", "6"},
               {"MPI_LOCALRANKID", "1"}, {"MPI_LOCALNRANKS", "2"}, {"HYDI_CONTROL_FD", "7"}};
  LaunchInfo info = read(hydra);
  EXPECT_EQ(info.launcher, Launcher::kHydra);
  EXPECT_EQ(info.pmi_fd, 6);
  EXPECT_EQ(info.topology.local_size, 2);
  // mpiexec inside an allocation: the SLURM_* of Hydra's proxy step do not describe the ranks.
  Env nested = srunTask2();
  nested.insert(hydra.begin(), hydra.end());
  EXPECT_EQ(read(nested).launcher, Launcher::kHydra);
  Env nested_torch = srunTask2();
  Env t = torchrunRank3();
  nested_torch.insert(t.begin(), t.end());
  EXPECT_EQ(read(nested_torch).launcher, Launcher::kTorchrun);

  Env no_fd = hydra;
  no_fd.erase("PMI_FD");
  no_fd["PMI_PORT"] = "h:1234";
  std::string msg = failure(no_fd);
  EXPECT_TRUE(contains(msg, "mpiexec")) << msg;
  EXPECT_TRUE(contains(msg, "PMI_FD")) << msg;

  Env pmix = {{"PMIX_RANK", "1"}, {"PMIX_NAMESPACE", "prterun-x@1"}};
  msg = failure(pmix);
  EXPECT_TRUE(contains(msg, "PMIx")) << msg;
  EXPECT_TRUE(contains(msg, "PMIX_RANK=1")) << msg;
  EXPECT_EQ(read({}).launcher, Launcher::kSingle);
}

class SecretFile {
 public:
  SecretFile(const std::string& text, mode_t mode)
      : path_("/tmp/perseus-secret-test-" + std::to_string(::getpid())) {
    std::ofstream(path_) << text << "\n";
    ::chmod(path_.c_str(), mode);
  }
  ~SecretFile() { ::unlink(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(JobSecret, FromEnvironmentOrPrivateFileOnly) {
  ::setenv("HOME", "/nonexistent-home", 1);  // no ~/.perseus/secret
  LaunchInfo info = read(torchrunRank3());
  try {
    userSecretHex(info, "");
    ADD_FAILURE() << "a job without a secret must not start";
  } catch (const InvalidArgumentError& e) {
    EXPECT_TRUE(contains(e.what(), "torchrun hands out no secret")) << e.what();
    EXPECT_TRUE(contains(e.what(), "PERSEUS_SECRET")) << e.what();
  }
  info.secret_hex = "short";
  EXPECT_THROW(userSecretHex(info, ""), InvalidArgumentError);
  info.secret_hex = "correct horse battery staple";
  const std::string a = userSecretHex(info, "");
  EXPECT_EQ(a.size(), 64u);
  LaunchInfo other = info;
  other.launch_id += "x";
  EXPECT_NE(userSecretHex(other, ""), a) << "each job gets its own key";

  info.secret_hex.clear();
  SecretFile readable("correct horse battery staple", 0644);
  try {
    userSecretHex(info, readable.path());
    ADD_FAILURE() << "a secret that others can read must be refused";
  } catch (const InvalidArgumentError& e) {
    EXPECT_TRUE(contains(e.what(), "chmod 600")) << e.what();
  }
  ::chmod(readable.path().c_str(), 0600);
  EXPECT_EQ(userSecretHex(info, readable.path()), a);
  EXPECT_THROW(userSecretHex(info, "/nonexistent/secret"), InvalidArgumentError);
}

void setEnv(const char* name, const std::string& value) { ::setenv(name, value.c_str(), 1); }

// Forked ranks on two simulated hosts (127.0.0.1 and 127.0.0.2), 2 ranks each, form one job
// from one launcher's variables; the topology must equal perseusrun's for the same placement.
void formJob(Launcher launcher) {
  const int port = 24000 + ::getpid() % 4000;
  auto status = testing::runForked(
      4,
      [&](int rank) {
        const int host = rank / 2;
        const std::string name = "node0" + std::to_string(host + 1);
        if (launcher == Launcher::kTorchrun) {
          setEnv("RANK", std::to_string(rank));
          setEnv("WORLD_SIZE", "4");
          setEnv("LOCAL_RANK", std::to_string(rank % 2));
          setEnv("LOCAL_WORLD_SIZE", "2");
          setEnv("GROUP_RANK", std::to_string(host));
          setEnv("MASTER_ADDR", "127.0.0.1");
          setEnv("MASTER_PORT", std::to_string(port - 1));
          setEnv("PERSEUS_HOSTNAME", name);
        } else {
          setEnv("SLURM_JOB_ID", "7");
          setEnv("SLURM_STEP_ID", "0");
          setEnv("SLURM_PROCID", std::to_string(rank));
          setEnv("SLURM_STEP_NUM_TASKS", "4");
          setEnv("SLURM_LOCALID", std::to_string(rank % 2));
          setEnv("SLURM_NODEID", std::to_string(host));
          setEnv("SLURM_STEP_TASKS_PER_NODE", "2(x2)");
          setEnv("SLURM_STEP_NODELIST", "127.0.0.1,127.0.0.2");
          setEnv("SLURMD_NODENAME", name);
          setEnv("PERSEUS_PORT", std::to_string(port));
        }
        setEnv("PERSEUS_SECRET", "a secret for this test only");
        setEnv("PERSEUS_IFACE", "127.0.0." + std::to_string(host + 1));
        setEnv("PERSEUS_START_TIMEOUT", "20");
        auto world = bootstrap(Params::fromEnvironment());
        const Topology& t = world->topology;
        if (t.rank != rank || t.size != 4) return 30;
        if (t.local_rank != rank % 2 || t.local_size != 2) return 31;
        if (t.cross_rank != host || t.cross_size != 2) return 32;
        if (t.hostname != name) return 33;
        uint8_t out = static_cast<uint8_t>(rank), in[4] = {};
        std::vector<transport::SendOp> sends;
        std::vector<transport::RecvOp> recvs;
        for (int peer = 0; peer < 4; ++peer) {
          if (peer == rank) continue;
          sends.push_back({peer, &out, 1});
          recvs.push_back({peer, &in[peer], 1});
        }
        world->transport->exchange(sends, recvs);
        for (int peer = 0; peer < 4; ++peer) {
          if (peer != rank && in[peer] != peer) return 40;
        }
        return 0;
      },
      40000ms);
  for (int r = 0; r < 4; ++r) EXPECT_TRUE(status[r].ok()) << r << ": " << status[r].describe();
}

TEST(LauncherBootstrap, TorchrunVariablesFormOneJob) { formJob(Launcher::kTorchrun); }
TEST(LauncherBootstrap, SrunVariablesFormOneJob) { formJob(Launcher::kSlurm); }

TEST(LauncherBootstrap, NoSecretFailsAtInit) {
  auto status = testing::runForked(
      1,
      [&](int) {
        setEnv("HOME", "/nonexistent-home");
        ::unsetenv("PERSEUS_SECRET");
        for (const auto& [k, v] : torchrunRank3()) setEnv(k.c_str(), v);
        try {
          bootstrap(Params::fromEnvironment());
        } catch (const InvalidArgumentError& e) {
          return contains(e.what(), "no job secret") ? 0 : 50;
        }
        return 51;
      },
      20000ms);
  EXPECT_TRUE(status[0].ok()) << status[0].describe();
}

}  // namespace
}  // namespace perseus::rendezvous
