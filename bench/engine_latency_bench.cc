// Latency of one small allreduce through the whole stack: C API -> engine cycle (negotiation
// via the response cache) -> shared-memory collective -> handle completion, with 2 (or argv[1])
// forked ranks on this host, bootstrapped like perseusrun does.
//
//   engine_latency_bench [ranks=2] [iterations=20000] [bytes=4] [async|blocking] [name=lat]
//
// async (the default): perseus_allreduce, perseus_wait, perseus_release; blocking:
// perseus_allreduce_blocking. `name`: the tensor's name; torch.distributed's (e.g.
// pt.0.allreduce.float32.1.3) are longer than a std::string holds without allocating.
//
// Prints per-rank median and p10/p90 of per-op time over batches of back-to-back ops.
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "perseus/c_api.h"

namespace {

constexpr const char* kSecret = "0123456789abcdef0123456789abcdef";

int runRank(int iterations, int64_t bytes, bool blocking, const char* name) {
  if (perseus_init() != PERSEUS_OK) {
    std::fprintf(stderr, "init: %s\n", perseus_last_error());
    return 1;
  }
  perseus_topology topo;
  perseus_get_topology(&topo);
  int64_t count = std::max<int64_t>(1, bytes / 4);
  std::vector<float> buf(count, 1.0f);
  perseus_tensor t{buf.data(), PERSEUS_FLOAT32, 1, &count, PERSEUS_DEVICE_CPU, nullptr};
  auto one = [&] {
    if (blocking) {
      if (perseus_allreduce_blocking(name, &t, &t, PERSEUS_SUM, 1.0, 1.0, 0) != PERSEUS_OK) {
        std::fprintf(stderr, "allreduce: %s\n", perseus_last_error());
        std::exit(1);
      }
      return;
    }
    perseus_handle h;
    if (perseus_allreduce(name, &t, &t, PERSEUS_SUM, 1.0, 1.0, 0, &h) != PERSEUS_OK ||
        perseus_wait(h, 30) != PERSEUS_OK) {
      std::fprintf(stderr, "allreduce: %s\n", perseus_last_error());
      std::exit(1);
    }
    perseus_release(h);
  };
  for (int i = 0; i < 2000; ++i) one();
  const int batch = 200;
  std::vector<double> per_op;
  for (int done = 0; done < iterations; done += batch) {
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < batch; ++i) one();
    per_op.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
            .count() /
        batch);
  }
  double mean = 0;
  for (double v : per_op) mean += v / per_op.size();
  std::sort(per_op.begin(), per_op.end());
  auto q = [&](double f) { return per_op[static_cast<size_t>(f * (per_op.size() - 1))]; };
  std::printf(
      "rank %d/%d: allreduce%s %lld B: median %.2f us/op (p10 %.2f, p90 %.2f, mean %.2f) over %d "
      "ops\n",
      topo.rank, topo.size, blocking ? " (blocking)" : "", static_cast<long long>(count * 4),
      q(0.5), q(0.1), q(0.9), mean, iterations);
  std::fflush(stdout);
  perseus_shutdown();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 2;
  const int iterations = argc > 2 ? std::atoi(argv[2]) : 20000;
  const int64_t bytes = argc > 3 ? std::atoll(argv[3]) : 4;
  const bool blocking = argc > 4 && std::string(argv[4]) == "blocking";
  const char* name = argc > 5 ? argv[5] : "lat";
  void* server = nullptr;
  int32_t port = 0;
  if (perseus_store_server_start("127.0.0.1", 0, kSecret, &port, &server) != PERSEUS_OK) {
    std::fprintf(stderr, "store server: %s\n", perseus_last_error());
    return 1;
  }
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      setenv("PERSEUS_RANK", std::to_string(r).c_str(), 1);
      setenv("PERSEUS_SIZE", std::to_string(n).c_str(), 1);
      setenv("PERSEUS_CONTROLLER_ADDR", "127.0.0.1", 1);
      setenv("PERSEUS_CONTROLLER_PORT", std::to_string(port).c_str(), 1);
      setenv("PERSEUS_SECRET", kSecret, 1);
      std::fflush(stdout);
      _exit(runRank(iterations, bytes, blocking, name));
    }
    pids.push_back(pid);
  }
  int failed = 0;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed = 1;
  }
  perseus_store_server_stop(server);
  return failed;
}
