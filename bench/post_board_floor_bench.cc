// The floor of a posted allreduce (Note [Posted collectives], collectives/post_board.h): two ranks
// as threads on two cores run only the protocol, one op at a time: copy the input into the pool,
// count the post (compare-and-swap on the shared word), wait for the other's post, reduce
// both posts into the output. No engine, no handle, no allocation. The difference between this
// and engine_latency_bench is the engine's software per op.
//   build/release/bench/post_board_floor_bench [iterations] [bytes...]
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "collectives/post_board.h"
#include "kernels/reduce.h"

namespace {

using perseus::collectives::PostBoard;

void pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

double medianUs(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 200000;
  std::vector<size_t> sizes;
  for (int i = 2; i < argc; ++i) sizes.push_back(static_cast<size_t>(std::atoll(argv[i])));
  if (sizes.empty()) sizes = {4, 1024, 4096};
  constexpr size_t kPool = 64 << 10;
  for (size_t bytes : sizes) {
    std::vector<std::atomic<uint64_t>> states(1);
    states[0].store(0);
    // Listening flags and post counts, each on a line of its own as in the shared segment.
    struct alignas(64) Line {
      std::atomic<uint64_t> v{0};
    };
    std::vector<Line> lines(4);
    alignas(64) static unsigned char pools[2][2][kPool];
    std::vector<double> per_rank(2);
    auto rank = [&](int r) {
      pin(r);
      PostBoard b(states.data(), 1, {{pools[0][0], pools[0][1]}, {pools[1][0], pools[1][1]}}, kPool,
                  {&lines[0].v, &lines[1].v}, {&lines[2].v, &lines[3].v}, r);
      std::vector<float> in(bytes / sizeof(float) + 1, 1.0f), out(in.size());
      const size_t count = bytes / sizeof(float);
      const void* srcs[2];
      std::vector<double> batches;
      constexpr int kBatch = 1000;
      auto start = std::chrono::steady_clock::now();
      for (uint64_t g = 1; g <= static_cast<uint64_t>(iterations); ++g) {
        std::memcpy(b.payload(r, g, 0), in.data(), bytes);
        b.publish(0);
        while (b.state(0, g) != PostBoard::State::kComplete) {
        }
        srcs[0] = b.payload(0, g, 0);
        srcs[1] = b.payload(1, g, 0);
        perseus::kernels::reduceN(out.data(), srcs, 2, count, perseus::DataType::kFloat32,
                                  perseus::ReduceOp::kSum);
        if (g % kBatch == 0) {
          auto now = std::chrono::steady_clock::now();
          batches.push_back(std::chrono::duration<double, std::micro>(now - start).count() /
                            kBatch);
          start = now;
        }
      }
      per_rank[static_cast<size_t>(r)] = medianUs(batches);
    };
    std::thread t1(rank, 1);
    rank(0);
    t1.join();
    std::printf(
        "{\"library\": \"floor\", \"collective\": \"posted-allreduce\", \"ranks\": 2, "
        "\"bytes\": %zu, \"time_us\": %.3f}\n",
        bytes, std::max(per_rank[0], per_rank[1]));
  }
  return 0;
}
