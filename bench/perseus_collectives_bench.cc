// Perseus side of the benchmark suite, through the public C API (the engine, negotiation and
// fusion included), with the timing rule of bench/peers/* (docs/PERFORMANCE.md) and the same
// JSON lines. Launch with perseusrun or mpirun:
//   perseusrun -np 2 build/release/bench/perseus_collectives_bench sweep [max_mib] [collective]
//   perseusrun -np 2 build/release/bench/perseus_collectives_bench latency
//   perseusrun -np 2 build/release/bench/perseus_collectives_bench model-step
#include <perseus/c_api.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

namespace {

int g_rank = 0, g_size = 1;

void check(perseus_status s, const char* what) {
  if (s != PERSEUS_OK) {
    std::fprintf(stderr, "rank %d: %s failed (%d): %s\n", g_rank, what, s, perseus_last_error());
    std::exit(1);
  }
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

perseus_tensor tensor(void* data, int64_t* shape, int32_t dtype = PERSEUS_FLOAT32) {
  return perseus_tensor{data, dtype, 1, shape, PERSEUS_DEVICE_CPU, nullptr};
}

// Global max of a per-rank value, through Perseus itself.
double maxOverRanks(double v) {
  int64_t shape[1] = {1};
  perseus_tensor t = tensor(&v, shape, PERSEUS_FLOAT64);
  perseus_handle h;
  check(perseus_allreduce("bench.max", &t, &t, PERSEUS_MAX, 1.0, 1.0, 0, &h), "allreduce");
  check(perseus_wait(h, -1), "wait");
  perseus_release(h);
  return v;
}

void barrier() {
  perseus_handle h;
  check(perseus_barrier(0, &h), "barrier");
  check(perseus_wait(h, -1), "wait");
  perseus_release(h);
}

double busFactor(const std::string& c, int n) {
  if (c == "allreduce") return 2.0 * (n - 1) / n;
  if (c == "broadcast") return 1.0;
  return static_cast<double>(n - 1) / n;
}

// BENCH_HUGEPAGES=1: buffers are advised as transparent huge pages before their first touch.
template <class T>
struct BenchAllocator {
  using value_type = T;
  BenchAllocator() = default;
  template <class U>
  BenchAllocator(const BenchAllocator<U>&) {}
  T* allocate(size_t n) {
    const size_t huge = size_t{2} << 20, bytes = (n * sizeof(T) + huge - 1) / huge * huge;
    void* p = std::aligned_alloc(huge, bytes);
    if (!p) throw std::bad_alloc();
    if (std::getenv("BENCH_HUGEPAGES") && std::atoi(std::getenv("BENCH_HUGEPAGES")) != 0) {
      madvise(p, bytes, MADV_HUGEPAGE);
    }
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t) { std::free(p); }
  bool operator==(const BenchAllocator&) const { return true; }
  bool operator!=(const BenchAllocator&) const { return false; }
};
using Buffer = std::vector<float, BenchAllocator<float>>;

struct Op {
  std::string collective;
  // One name per collective and size, as a model has one per tensor: a name whose shape
  // changes falls back to negotiation each time (a posted name retires its slot).
  std::string name;
  Buffer in, out;
  int64_t shape[1];
  size_t bytes = 0;       // nccl-tests' S
  bool in_place = false;  // allreduce only: out is in
  // Allreduce and broadcast run as blocking calls, as MPI's do (BENCH_ASYNC=1: submit, wait
  // and release a handle, as the asynchronous framework calls do).
  bool blocking = !(std::getenv("BENCH_ASYNC") && std::atoi(std::getenv("BENCH_ASYNC")) != 0);
  void run() {
    perseus_tensor ti = tensor(in.data(), shape);
    perseus_tensor to = in_place ? ti : tensor(out.data(), shape);
    if (blocking && collective == "allreduce") {
      check(perseus_allreduce_blocking(name.c_str(), &ti, &to, PERSEUS_SUM, 1.0, 1.0, 0),
            "allreduce");
      return;
    }
    if (blocking && collective == "broadcast") {
      check(perseus_broadcast_blocking(name.c_str(), &ti, &ti, 0, 0), "broadcast");
      return;
    }
    perseus_handle h;
    if (collective == "allreduce") {
      check(perseus_allreduce(name.c_str(), &ti, &to, PERSEUS_SUM, 1.0, 1.0, 0, &h), "allreduce");
    } else if (collective == "broadcast") {
      check(perseus_broadcast(name.c_str(), &ti, &ti, 0, 0, &h), "broadcast");
    } else if (collective == "allgather") {
      check(perseus_allgather(name.c_str(), &ti, 0, &h), "allgather");
    } else {
      check(perseus_reducescatter(name.c_str(), &ti, PERSEUS_SUM, 1.0, 1.0, 0, &h),
            "reducescatter");
    }
    check(perseus_wait(h, -1), collective.c_str());
    perseus_release(h);
  }
};

double timed(Op& op, long k) {
  barrier();
  double t0 = now();
  for (long i = 0; i < k; ++i) op.run();
  return maxOverRanks((now() - t0) / k);
}

void printRow(const char* library, const std::string& collective, size_t bytes,
              std::vector<double>& t, int wrong, const char* extra = "") {
  std::sort(t.begin(), t.end());
  double med = t[t.size() / 2];
  double algbw = bytes / med / 1e9;
  if (g_rank == 0)
    std::printf(
        "{\"library\": \"%s\", \"collective\": \"%s\", \"ranks\": %d, \"bytes\": %zu, "
        "\"time_us\": %.4f, \"min_us\": %.4f, \"max_us\": %.4f, \"algbw_gbs\": %.4f, "
        "\"busbw_gbs\": %.4f, \"wrong\": %d%s}\n",
        library, collective.c_str(), g_size, bytes, med * 1e6, t.front() * 1e6, t.back() * 1e6,
        algbw, algbw * busFactor(collective, g_size), wrong, extra);
  std::fflush(stdout);
}

int samples() { return std::getenv("SAMPLES") ? std::atoi(std::getenv("SAMPLES")) : 11; }
double minSample() {
  return std::getenv("MIN_SAMPLE_S") ? std::atof(std::getenv("MIN_SAMPLE_S")) : 0.02;
}

void sweep(double max_mib, const std::string& only) {
  const char* names[] = {"allreduce", "allgather", "broadcast", "reducescatter"};
  for (const char* name : names) {
    // `only`: "all" or a comma-separated list of collectives.
    if (only != "all" &&
        ("," + only + ",").find(std::string(",") + name + ",") == std::string::npos)
      continue;
    // MIN_BYTES skips the small sizes (profiling one size range).
    const size_t first =
        std::getenv("MIN_BYTES") ? std::strtoull(std::getenv("MIN_BYTES"), nullptr, 10) : 4;
    for (size_t bytes = 4; bytes <= static_cast<size_t>(max_mib * (1 << 20)); bytes *= 4) {
      if (bytes < first) continue;
      Op op;
      op.collective = name;
      op.name = std::string("bench.") + name + "." + std::to_string(bytes);
      size_t n = bytes / 4;
      bool split = op.collective == "allgather" || op.collective == "reducescatter";
      if (split && n < static_cast<size_t>(g_size)) continue;
      if (split) n -= n % g_size;
      size_t in_n = op.collective == "allgather" ? n / g_size : n;
      op.in.assign(in_n, static_cast<float>(g_rank + 1));
      op.out.assign(op.collective == "allreduce" ? n : 1, 0.f);
      op.shape[0] = static_cast<int64_t>(in_n);
      op.bytes = n * 4;
      op.run();
      long k = 1;
      for (;;) {
        double dt = timed(op, k) * k;
        if (dt >= minSample() || k >= (1L << 22)) break;
        k = std::max(2L, static_cast<long>(k * minSample() / std::max(dt, 1e-9) * 1.2) + 1);
      }
      std::vector<double> t;
      for (int s = 0; s < samples(); ++s) t.push_back(timed(op, k));
      int wrong = 0;
      if (op.collective == "allreduce") {
        float expect = g_size * (g_size + 1) / 2.0f;
        for (float v : op.out)
          if (v != expect) {
            wrong = 1;
            break;
          }
      }
      printRow("perseus", op.collective, op.bytes, t, wrong);
      // As nccl-tests, large allreduces are also timed in place (as DistributedOptimizer runs
      // them): the output is the input, so no output line is fetched before it is written.
      if (op.collective == "allreduce" && op.bytes >= (1u << 20)) {
        op.in_place = true;
        std::fill(op.in.begin(), op.in.end(), 0.f);  // stays 0 under Sum, however many ops
        t.clear();
        for (int s = 0; s < samples(); ++s) t.push_back(timed(op, k));
        wrong = std::any_of(op.in.begin(), op.in.end(), [](float v) { return v != 0.f; });
        printRow("perseus-inplace", op.collective, op.bytes, t, wrong);
      }
    }
  }
}

// Submission-to-completion time of a 4-byte allreduce through the asynchronous engine.
void latency() {
  float v = 1.f;
  int64_t shape[1] = {1};
  perseus_tensor t = tensor(&v, shape);
  std::vector<double> per_op;
  const int iters = std::getenv("LATENCY_ITERS") ? std::atoi(std::getenv("LATENCY_ITERS")) : 20000;
  for (int i = 0; i < iters + 1000; ++i) {
    double t0 = now();
    perseus_handle h;
    check(perseus_allreduce("lat", &t, &t, PERSEUS_SUM, 1.0, 1.0, 0, &h), "allreduce");
    int done = 0;
    while (!done) check(perseus_poll(h, &done), "poll");
    check(perseus_wait(h, -1), "wait");
    perseus_release(h);
    if (i >= 1000) per_op.push_back(now() - t0);
  }
  std::sort(per_op.begin(), per_op.end());
  double med = maxOverRanks(per_op[per_op.size() / 2]);
  double p99 = maxOverRanks(per_op[per_op.size() * 99 / 100]);
  if (g_rank == 0)
    std::printf(
        "{\"library\": \"perseus\", \"collective\": \"allreduce-latency\", \"ranks\": %d, "
        "\"bytes\": 4, \"time_us\": %.3f, \"p99_us\": %.3f, \"iters\": %d}\n",
        g_size, med * 1e6, p99 * 1e6, iters);
  std::fflush(stdout);
}

// The 161 gradient tensors of ResNet-50 (25,557,032 float32 parameters).
std::vector<int64_t> resnet50Sizes() {
  std::vector<int64_t> sizes;
  auto conv = [&](int64_t in, int64_t out, int64_t k) { sizes.push_back(in * out * k * k); };
  auto bn = [&](int64_t c) {
    sizes.push_back(c);
    sizes.push_back(c);
  };
  conv(3, 64, 7);
  bn(64);
  int64_t in = 64;
  const int64_t widths[] = {64, 128, 256, 512}, blocks[] = {3, 4, 6, 3};
  for (int l = 0; l < 4; ++l) {
    int64_t w = widths[l], out = w * 4;
    for (int b = 0; b < blocks[l]; ++b) {
      conv(in, w, 1);
      bn(w);
      conv(w, w, 3);
      bn(w);
      conv(w, out, 1);
      bn(out);
      if (b == 0) {
        conv(in, out, 1);
        bn(out);
      }
      in = out;
    }
  }
  sizes.push_back(2048 * 1000);
  sizes.push_back(1000);
  return sizes;
}

void modelStep() {
  std::vector<int64_t> sizes = resnet50Sizes();
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  std::vector<std::vector<float>> grads;
  for (int64_t s : sizes) grads.emplace_back(static_cast<size_t>(s), 1.f);
  std::vector<float> flat(static_cast<size_t>(total), 1.f);
  auto step = [&] {
    std::vector<perseus_handle> hs(sizes.size());
    std::vector<perseus_tensor> ts(sizes.size());
    for (size_t i = 0; i < sizes.size(); ++i) {
      ts[i] = tensor(grads[i].data(), &sizes[i]);
      std::string name = "grad." + std::to_string(i);
      check(perseus_allreduce(name.c_str(), &ts[i], &ts[i], PERSEUS_AVERAGE, 1.0, 1.0, 0, &hs[i]),
            "allreduce");
    }
    for (perseus_handle h : hs) {
      check(perseus_wait(h, -1), "wait");
      perseus_release(h);
    }
  };
  auto single = [&] {
    perseus_tensor t = tensor(flat.data(), &total);
    perseus_handle h;
    check(perseus_allreduce("flat", &t, &t, PERSEUS_AVERAGE, 1.0, 1.0, 0, &h), "allreduce");
    check(perseus_wait(h, -1), "wait");
    perseus_release(h);
  };
  step();
  single();
  std::vector<double> ts_step, ts_single;
  for (int s = 0; s < samples(); ++s) {  // interleaved so both see the same machine state
    barrier();
    double t0 = now();
    step();
    ts_step.push_back(maxOverRanks(now() - t0));
    barrier();
    t0 = now();
    single();
    ts_single.push_back(maxOverRanks(now() - t0));
  }
  std::sort(ts_step.begin(), ts_step.end());
  std::sort(ts_single.begin(), ts_single.end());
  double a = ts_step[ts_step.size() / 2], b = ts_single[ts_single.size() / 2];
  if (g_rank == 0)
    std::printf(
        "{\"library\": \"perseus\", \"collective\": \"resnet50-step\", \"ranks\": %d, "
        "\"tensors\": %zu, \"bytes\": %lld, \"time_us\": %.1f, \"single_allreduce_us\": %.1f, "
        "\"ratio\": %.3f}\n",
        g_size, sizes.size(), static_cast<long long>(total * 4), a * 1e6, b * 1e6, a / b);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "sweep";
  check(perseus_init(), "perseus_init");
  perseus_topology topo;
  check(perseus_get_topology(&topo), "topology");
  g_rank = topo.rank;
  g_size = topo.size;
  if (mode == "sweep") {
    sweep(argc > 2 ? std::atof(argv[2]) : 256, argc > 3 ? argv[3] : "all");
  } else if (mode == "latency") {
    latency();
  } else if (mode == "model-step") {
    modelStep();
  } else {
    std::fprintf(stderr, "usage: %s sweep [max_mib] [collective] | latency | model-step\n",
                 argv[0]);
    return 2;
  }
  check(perseus_shutdown(), "perseus_shutdown");
  return 0;
}
