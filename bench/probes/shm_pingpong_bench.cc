// Two forked processes over the shared-memory transport (ChannelTransport + ShmChannel):
//   - round-trip latency of a small message, busy-polled (PERSEUS_SPIN_US default) and blocking
//     (spin 0: every wait sleeps on the futex doorbell), and
//   - streaming bandwidth one way and both ways at once.
// Usage: shm_pingpong_bench [stream MiB per message, default 4] [total MiB, default 1024]
// Prints one human line and one JSON line ({"bench":"shm_pingpong",...}) per measurement.
// Median of 11 samples; rank 0 reports.
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "common/params.h"
#include "transport/channel_transport.h"
#include "transport/shm/shm_local_group.h"

namespace {

using Clock = std::chrono::steady_clock;
using perseus::Params;
using perseus::transport::ChannelTransport;

constexpr int kSamples = 11;

struct SharedState {
  std::atomic<uint32_t> arrived;
  std::atomic<uint32_t> generation;
  alignas(128) std::atomic<uint64_t> ping;  // the floor: one cache line bounced between cores
  alignas(128) std::atomic<uint64_t> pong;
};

void barrier(SharedState* s) {  // two parties
  const uint32_t gen = s->generation.load();
  if (s->arrived.fetch_add(1) + 1 == 2) {
    s->arrived.store(0);
    s->generation.fetch_add(1);
    return;
  }
  while (s->generation.load() == gen) std::this_thread::sleep_for(std::chrono::microseconds(20));
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void report(int rank, const char* metric, size_t bytes, double value, const char* unit) {
  if (rank != 0) return;
  std::printf("%-26s %10zu B  %12.3f %s\n", metric, bytes, value, unit);
  std::printf(
      "{\"bench\":\"shm_pingpong\",\"metric\":\"%s\",\"bytes\":%zu,\"value\":%.4f,\"unit\":\"%s\"}"
      "\n",
      metric, bytes, value, unit);
  std::fflush(stdout);
}

std::unique_ptr<ChannelTransport> connect(
    const std::string& job, int rank, SharedState* s, const Params& params,
    std::unique_ptr<perseus::transport::shm::ShmLocalGroup>* keep) {
  *keep =
      perseus::transport::shm::createShmLocalGroup(job, rank, {0, 1}, params, [s] { barrier(s); });
  std::vector<std::unique_ptr<perseus::transport::Channel>> channels(2);
  channels[1 - rank] = std::move((*keep)->channels.at(1 - rank));
  return std::make_unique<ChannelTransport>(rank, std::move(channels), params, (*keep)->doorbell);
}

// Round trip of `bytes`: rank 0 sends, rank 1 echoes. Returns microseconds per round trip.
double pingPong(ChannelTransport& t, size_t bytes, int iters, SharedState* s) {
  std::vector<char> buf(std::max<size_t>(bytes, 1));
  const int peer = 1 - t.rank();
  std::vector<double> samples;
  for (int k = 0; k < kSamples; ++k) {
    barrier(s);
    const auto start = Clock::now();
    for (int i = 0; i < iters; ++i) {
      if (t.rank() == 0) {
        t.send(peer, buf.data(), bytes);
        t.recv(peer, buf.data(), bytes);
      } else {
        t.recv(peer, buf.data(), bytes);
        t.send(peer, buf.data(), bytes);
      }
    }
    samples.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count() /
                      iters);
  }
  return median(samples);
}

// GB/s of `total` bytes in messages of `msg` bytes; both ways at once when `bidir`.
double stream(ChannelTransport& t, size_t msg, size_t total, bool bidir, SharedState* s) {
  std::vector<char> out(msg, 1), in(msg);
  const int peer = 1 - t.rank();
  const size_t count = std::max<size_t>(1, total / msg);
  std::vector<double> samples;
  for (int k = 0; k < kSamples; ++k) {
    barrier(s);
    const auto start = Clock::now();
    for (size_t i = 0; i < count; ++i) {
      if (bidir) {
        t.sendRecv(peer, out.data(), msg, peer, in.data(), msg);
      } else if (t.rank() == 0) {
        t.send(peer, out.data(), msg);
      } else {
        t.recv(peer, in.data(), msg);
      }
    }
    int ack = 0;  // the sender's clock stops when the receiver has everything
    if (t.rank() == 0) {
      t.recv(peer, &ack, sizeof ack);
    } else {
      t.send(peer, &ack, sizeof ack);
    }
    const double secs = std::chrono::duration<double>(Clock::now() - start).count();
    samples.push_back(static_cast<double>(count * msg) / secs / 1e9);
  }
  return median(samples);
}

// Round trip of a bare flag in shared memory (no transport): this machine's floor.
double flagPingPong(int rank, int iters, SharedState* s) {
  std::vector<double> samples;
  uint64_t seq = 0;
  for (int k = 0; k < kSamples; ++k) {
    barrier(s);
    const auto start = Clock::now();
    for (int i = 0; i < iters; ++i) {
      ++seq;
      if (rank == 0) {
        s->ping.store(seq, std::memory_order_release);
        while (s->pong.load(std::memory_order_acquire) != seq) {
        }
      } else {
        while (s->ping.load(std::memory_order_acquire) != seq) {
        }
        s->pong.store(seq, std::memory_order_release);
      }
    }
    samples.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count() /
                      iters);
  }
  return median(samples);
}

// Round trip over one ShmChannel driven directly (no ChannelTransport): the ring's own cost.
double channelPingPong(perseus::transport::Channel& c, int rank, size_t bytes, int iters,
                       SharedState* s) {
  std::vector<char> buf(bytes);
  std::vector<double> samples;
  auto sendAll = [&] {
    for (size_t done = 0; done < bytes;) done += c.trySend(buf.data() + done, bytes - done);
  };
  auto recvAll = [&] {
    for (size_t done = 0; done < bytes;) done += c.tryRecv(buf.data() + done, bytes - done);
  };
  for (int k = 0; k < kSamples; ++k) {
    barrier(s);
    const auto start = Clock::now();
    for (int i = 0; i < iters; ++i) {
      if (rank == 0) {
        sendAll();
        recvAll();
      } else {
        recvAll();
        sendAll();
      }
    }
    samples.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count() /
                      iters);
  }
  return median(samples);
}

int runRank(int rank, const std::string& job, SharedState* s, size_t msg, size_t total) {
  Params params = Params::fromEnvironment();
  flagPingPong(rank, 1000, s);
  report(rank, "rtt_bare_flag_floor", 8, flagPingPong(rank, 100000, s), "us");
  {
    auto group = perseus::transport::shm::createShmLocalGroup(job + "-raw", rank, {0, 1}, params,
                                                              [s] { barrier(s); });
    perseus::transport::Channel& c = *group->channels.at(1 - rank);
    channelPingPong(c, rank, 4, 1000, s);
    report(rank, "rtt_channel_only", 4, channelPingPong(c, rank, 4, 100000, s), "us");
  }
  {
    std::unique_ptr<perseus::transport::shm::ShmLocalGroup> group;
    auto t = connect(job + "-spin", rank, s, params, &group);
    for (size_t bytes : {size_t{4}, size_t{64}, size_t{4096}, size_t{65536}}) {
      pingPong(*t, bytes, 200, s);  // warm-up
      report(rank, "rtt_busy_poll", bytes, pingPong(*t, bytes, bytes < 4096 ? 20000 : 2000, s),
             "us");
    }
    report(rank, "stream_one_way", msg, stream(*t, msg, total, false, s), "GB/s");
    report(rank, "stream_both_ways_per_dir", msg, stream(*t, msg, total, true, s), "GB/s");
  }
  params.spin_us = 0;
  std::unique_ptr<perseus::transport::shm::ShmLocalGroup> group;
  auto t = connect(job + "-block", rank, s, params, &group);
  pingPong(*t, 4, 50, s);
  report(rank, "rtt_blocking_futex", 4, pingPong(*t, 4, 500, s), "us");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t msg = static_cast<size_t>((argc > 1 ? std::atof(argv[1]) : 4.0) * (1 << 20));
  const size_t total = static_cast<size_t>((argc > 2 ? std::atof(argv[2]) : 1024.0) * (1 << 20));
  void* mem =
      mmap(nullptr, sizeof(SharedState), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return 1;
  auto* s = new (mem) SharedState{};
  const std::string job = "bench" + std::to_string(getpid());
  std::fflush(nullptr);
  pid_t pids[2];
  for (int r = 0; r < 2; ++r) {
    pids[r] = fork();
    if (pids[r] == 0) {
      int code = 1;
      try {
        code = runRank(r, job, s, msg, total);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
      }
      std::fflush(nullptr);
      _exit(code);
    }
  }
  int failed = 0;
  for (pid_t p : pids) {
    int status = 0;
    waitpid(p, &status, 0);
    failed |= !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  return failed;
}
