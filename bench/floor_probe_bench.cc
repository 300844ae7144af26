// The two floors of a 2-rank allreduce on one host (docs/PERFORMANCE.md, the core's targets),
// measured in the run that measures the allreduce:
//   memcpy     two threads (CPU 0 and 1) each copy their own S-byte buffer at once: one read
//              of every input and one write of every output, the traffic no allreduce avoids;
//   crosscore  each thread writes an S-byte block, both meet at a barrier, and each reads
//              the block the other core wrote: the rate at which bytes written on one core
//              are consumed on the other, which a 2-rank allreduce needs for S bytes per rank
//              (half of the peer's input, half of the result) on top of the memcpy traffic.
// Usage: floor_probe_bench [max MiB, default 256]. One JSON line per figure:
//   {"library": "floor", "collective": "memcpy"|"crosscore", "ranks": 2, "bytes": S, "time_us": t,
//    "gbs": S / t} — for crosscore, S is the block each core reads from the other.
// Median of 11 samples, each lasting at least 20 ms.
#include <immintrin.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kSamples = 11;
constexpr double kSampleSeconds = 0.02;

void pinTo(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu % static_cast<int>(std::max(1u, std::thread::hardware_concurrency())), &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

// Two-party spinning barrier (the allreduce's own barriers spin too).
class SpinBarrier {
 public:
  void arrive() {
    const uint32_t gen = generation_.load(std::memory_order_acquire);
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == 2) {
      arrived_.store(0, std::memory_order_relaxed);
      generation_.fetch_add(1, std::memory_order_release);
      return;
    }
    while (generation_.load(std::memory_order_acquire) == gen) {
    }
  }

 private:
  alignas(64) std::atomic<uint32_t> arrived_{0};
  alignas(64) std::atomic<uint32_t> generation_{0};
};

uint64_t sumWords(const uint64_t* p, size_t n) {
  uint64_t s = 0;
  for (size_t i = 0; i < n; ++i) s += p[i];
  return s;
}

// Runs `rounds` of body(thread, round) on two pinned threads with a barrier after each round;
// returns the wall time of the rounds.
template <typename Body>
double timeRounds(int rounds, Body body) {
  SpinBarrier barrier;
  Clock::time_point t0, t1;
  auto worker = [&](int id) {
    pinTo(id);
    barrier.arrive();
    if (id == 0) t0 = Clock::now();
    for (int r = 0; r < rounds; ++r) body(id, r, barrier);
    barrier.arrive();
    if (id == 0) t1 = Clock::now();
  };
  std::thread other(worker, 1);
  worker(0);
  other.join();
  return std::chrono::duration<double>(t1 - t0).count();
}

template <typename Body>
double medianPerRound(Body body) {
  int rounds = 1;
  while (timeRounds(rounds, body) < kSampleSeconds && rounds < (1 << 20)) rounds *= 2;
  std::vector<double> per_round;
  for (int s = 0; s < kSamples; ++s) per_round.push_back(timeRounds(rounds, body) / rounds);
  std::sort(per_round.begin(), per_round.end());
  return per_round[kSamples / 2];
}

void report(const char* what, size_t bytes, double seconds) {
  std::printf(
      "{\"library\": \"floor\", \"collective\": \"%s\", \"ranks\": 2, \"bytes\": %zu, "
      "\"time_us\": %.3f, \"gbs\": %.3f}\n",
      what, bytes, seconds * 1e6, static_cast<double>(bytes) / seconds / 1e9);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const size_t max_bytes = static_cast<size_t>(argc > 1 ? std::atof(argv[1]) : 256) << 20;
  std::vector<size_t> sizes;
  for (size_t s = 64 << 10; s <= max_bytes; s *= 4) sizes.push_back(s);
  std::atomic<uint64_t> sink{0};  // keeps the reads
  for (size_t bytes : sizes) {
    const size_t words = bytes / sizeof(uint64_t);
    // memcpy: thread t copies src[t] to dst[t].
    std::vector<std::vector<uint64_t>> src(2, std::vector<uint64_t>(words, 1)),
        dst(2, std::vector<uint64_t>(words, 0));
    report("memcpy", bytes, medianPerRound([&](int id, int, SpinBarrier&) {
             std::memcpy(dst[id].data(), src[id].data(), bytes);
           }));
    // crosscore: thread t writes block[t], barrier, reads block[1 - t], barrier.
    std::vector<std::vector<uint64_t>> block(2, std::vector<uint64_t>(words, 0));
    report("crosscore", bytes, medianPerRound([&](int id, int round, SpinBarrier& barrier) {
             std::fill(block[id].begin(), block[id].end(), static_cast<uint64_t>(round));
             barrier.arrive();
             sink.fetch_add(sumWords(block[1 - id].data(), words), std::memory_order_relaxed);
             barrier.arrive();
           }));
    // crosscore-nt: the same, written with non-temporal stores (the block goes to memory, not
    // into the writer's cache), so the reader fetches it from DRAM instead of the other core.
    report("crosscore-nt", bytes, medianPerRound([&](int id, int round, SpinBarrier& barrier) {
             auto* p = reinterpret_cast<long long*>(block[id].data());
             for (size_t i = 0; i < words; ++i) _mm_stream_si64(p + i, round);
             _mm_sfence();
             barrier.arrive();
             sink.fetch_add(sumWords(block[1 - id].data(), words), std::memory_order_relaxed);
             barrier.arrive();
           }));
  }
  return sink.load() == 42 ? 1 : 0;
}
