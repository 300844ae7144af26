// Collective benchmark: allreduce (float32 sum), allgather, broadcast and reducescatter from
// 4 B to 256 MiB (x4 steps), N ranks (default 2) as forked processes over the real shared-memory
// transport and arena, rank i pinned to CPU i % ncpu.
//
// Per size: warm-up, then samples of k back-to-back ops (k calibrated so a sample lasts
// >= --sample-ms); time per op = (max over ranks of the sample time) / k; the median of the
// samples is reported with min and max. algbw = S / t and busbw = algbw * factor with the
// nccl-tests definitions (its doc/PERFORMANCE.md): S is the per-rank buffer (allreduce, broadcast)
// or the whole gathered/scattered vector (allgather, reducescatter); factor 2(n-1)/n for
// allreduce, (n-1)/n for allgather and reducescatter, 1 for broadcast.
//
// Output: a table on stderr and one JSON object per line on stdout:
//   {"bench":"collectives","op":"allreduce","algo":"shm","ranks":2,"bytes":4,"time_us":...,
//    "time_us_min":...,"time_us_max":...,"algbw_gbs":...,"busbw_gbs":...,"samples":11,"ok":true}
//
// --ops memcpy measures the floor: every rank memcpy()s S bytes at once.
//
// Usage: collectives_bench [--ranks N] [--min-bytes B] [--max-bytes B] [--samples S]
//                          [--sample-ms MS] [--ops allreduce,allgather,broadcast,reducescatter]
//                          [--algo NAME]   (forces the algorithm of every op, e.g. ring)
//                          [--cpus-per-rank C]  (rank i runs on CPUs i*C .. i*C+C-1, default 1;
//                          0 = no pinning; C > 1 lets PERSEUS_REDUCE_THREADS auto use them)
// Settings (slot size, spin) come from the PERSEUS_* environment as usual.
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "collectives/collectives.h"
#include "collectives/registry.h"
#include "transport/channel_transport.h"
#include "transport/shm/shm_local_group.h"

using namespace perseus;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  int ranks = 2;
  size_t min_bytes = 4, max_bytes = size_t{256} << 20;
  int samples = 11;
  double sample_ms = 20;
  std::string ops = "allreduce,allgather,broadcast,reducescatter";
  std::string algo;
  int cpus_per_rank = 1;
};

// A process-shared sense-reversing barrier for start-up (before the transport exists).
struct ForkBarrier {
  std::atomic<int> count{0};
  std::atomic<int> generation{0};
  void wait(int n) {
    int gen = generation.load();
    if (count.fetch_add(1) + 1 == n) {
      count.store(0);
      generation.fetch_add(1);
    } else {
      while (generation.load() == gen) sched_yield();
    }
  }
};

double busFactor(const std::string& op, int n) {
  if (op == "memcpy") return 1.0;
  if (op == "allreduce") return 2.0 * (n - 1) / n;
  if (op == "broadcast") return 1.0;
  return static_cast<double>(n - 1) / n;
}

struct Runner {
  collectives::Communicator& comm;
  const Options& opt;
  std::vector<unsigned char> a, b;
  std::vector<size_t> sizes;

  void once(const std::string& op, size_t bytes) {
    using collectives::Collective;
    const int n = comm.size();
    collectives::CollectiveArgs args;
    if (op == "memcpy") {  // the floor: every rank copies S bytes at the same time
      std::memcpy(b.data(), a.data(), bytes);
      return;
    }
    if (op == "allreduce") {
      args.kind = Collective::kAllreduce;
      args.in = a.data();
      args.out = b.data();
      args.count = std::max<size_t>(1, bytes / 4);
      args.dtype = DataType::kFloat32;
    } else if (op == "broadcast") {
      args.kind = Collective::kBroadcast;
      args.in = args.out = a.data();
      args.bytes = bytes;
    } else if (op == "allgather") {
      // S = the gathered vector; each rank contributes S / n.
      sizes.assign(n, bytes / n);
      args.kind = Collective::kAllgatherv;
      args.in = a.data();
      args.out = b.data();
      args.sizes = &sizes;
    } else {
      sizes.assign(n, std::max<size_t>(1, bytes / 4 / n));
      args.kind = Collective::kReducescatterv;
      args.in = a.data();
      args.out = b.data();
      args.sizes = &sizes;
      args.dtype = DataType::kFloat32;
    }
    if (opt.algo.empty())
      collectives::runCollective(comm, args);
    else
      collectives::runCollective(comm, args, opt.algo);
  }

  double maxOverRanks(double v) {
    collectives::allreduce(comm, &v, &v, 1, DataType::kFloat64, ReduceOp::kMax);
    return v;
  }

  void measure(const std::string& op, size_t bytes) {
    for (int i = 0; i < 3; ++i) once(op, bytes);
    // Calibrate k on rank-max times so every rank runs the same number of ops.
    long k = 1;
    while (true) {
      collectives::barrier(comm);
      auto t0 = Clock::now();
      for (long i = 0; i < k; ++i) once(op, bytes);
      double ms =
          maxOverRanks(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      if (ms >= opt.sample_ms || k >= (1L << 24)) break;
      k = std::max(k * 2, static_cast<long>(k * opt.sample_ms / std::max(ms, 1e-3) * 1.1));
    }
    std::vector<double> us;
    for (int s = 0; s < opt.samples; ++s) {
      collectives::barrier(comm);
      auto t0 = Clock::now();
      for (long i = 0; i < k; ++i) once(op, bytes);
      double t = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / k;
      us.push_back(maxOverRanks(t));
    }
    std::sort(us.begin(), us.end());
    double med = us[us.size() / 2];
    double algbw = bytes / med / 1e3;
    double busbw = algbw * busFactor(op, comm.size());
    if (comm.rank() != 0) return;
    collectives::CollectiveArgs probe;
    std::string algo = opt.algo.empty() ? "auto" : opt.algo;
    std::fprintf(
        stderr, "%-13s %10zu B  %12.3f us (%.3f-%.3f)  algbw %8.3f GB/s  busbw %8.3f GB/s  k=%ld\n",
        op.c_str(), bytes, med, us.front(), us.back(), algbw, busbw, k);
    std::printf(
        "{\"bench\":\"collectives\",\"op\":\"%s\",\"algo\":\"%s\",\"ranks\":%d,\"bytes\":%zu,"
        "\"time_us\":%.4f,\"time_us_min\":%.4f,\"time_us_max\":%.4f,\"algbw_gbs\":%.4f,"
        "\"busbw_gbs\":%.4f,\"samples\":%d,\"ops_per_sample\":%ld}\n",
        op.c_str(), algo.c_str(), comm.size(), bytes, med, us.front(), us.back(), algbw, busbw,
        opt.samples, k);
    std::fflush(stdout);
  }
};

int rankMain(int rank, const Options& opt, ForkBarrier* fb) {
  if (opt.cpus_per_rank > 0) {
    const long ncpu = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int c = 0; c < opt.cpus_per_rank; ++c) {
      CPU_SET(static_cast<int>((static_cast<long>(rank) * opt.cpus_per_rank + c) % ncpu), &set);
    }
    sched_setaffinity(0, sizeof set, &set);
  }
  Params params = Params::fromEnvironment();
  std::vector<int> ranks(opt.ranks);
  for (int i = 0; i < opt.ranks; ++i) ranks[i] = i;
  std::string job = "bench" + std::to_string(getppid());
  auto group =
      transport::shm::createShmLocalGroup(job, rank, ranks, params, [&] { fb->wait(opt.ranks); });
  std::vector<std::unique_ptr<transport::Channel>> channels(opt.ranks);
  for (auto& [peer, ch] : group->channels) channels[peer] = std::move(ch);
  transport::ChannelTransport tp(rank, std::move(channels), params, group->doorbell);
  collectives::Communicator comm(&tp, group->arena.get(), ranks, 0, params);

  Runner run{comm, opt, {}, {}, {}};
  run.a.assign(opt.max_bytes, 1);
  run.b.assign(opt.max_bytes, 0);
  std::string ops = opt.ops + ",";
  for (size_t pos = 0; pos < ops.size();) {
    size_t end = ops.find(',', pos);
    std::string op = ops.substr(pos, end - pos);
    pos = end + 1;
    if (op.empty()) continue;
    for (size_t bytes = opt.min_bytes; bytes <= opt.max_bytes; bytes *= 4) {
      run.measure(op, bytes);
    }
  }
  collectives::barrier(comm);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--ranks")
      opt.ranks = std::stoi(v);
    else if (k == "--min-bytes")
      opt.min_bytes = std::stoull(v);
    else if (k == "--max-bytes")
      opt.max_bytes = std::stoull(v);
    else if (k == "--samples")
      opt.samples = std::stoi(v);
    else if (k == "--sample-ms")
      opt.sample_ms = std::stod(v);
    else if (k == "--ops")
      opt.ops = v;
    else if (k == "--algo")
      opt.algo = v;
    else if (k == "--cpus-per-rank")
      opt.cpus_per_rank = std::stoi(v);
    else {
      std::fprintf(stderr,
                   "unknown option %s (see the comment at the top of collectives_bench.cc)\n",
                   k.c_str());
      return 2;
    }
  }
  auto* fb = static_cast<ForkBarrier*>(mmap(nullptr, sizeof(ForkBarrier), PROT_READ | PROT_WRITE,
                                            MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  new (fb) ForkBarrier();
  std::vector<pid_t> pids;
  for (int r = 0; r < opt.ranks; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      int rc = 1;
      try {
        rc = rankMain(r, opt, fb);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
      }
      std::fflush(stdout);
      _exit(rc);
    }
    pids.push_back(pid);
  }
  int failed = 0;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
  }
  return failed == 0 ? 0 : 1;
}
