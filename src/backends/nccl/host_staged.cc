#include "backends/nccl/host_staged.h"

#include <algorithm>
#include <chrono>
#include <numeric>
#include <thread>

#include "backends/nccl/cuda_util.h"
#include "collectives/collectives.h"
#include "common/status.h"
#include "kernels/reduce.h"

namespace perseus::nccl {
namespace {

// Returns an event to its pool on scope exit.
class PooledEvent {
 public:
  explicit PooledEvent(EventPool& pool) : pool_(pool), event_(pool.acquire()) {}
  ~PooledEvent() { pool_.release(event_); }
  cudaEvent_t get() const { return event_; }

 private:
  EventPool& pool_;
  cudaEvent_t event_;
};

}  // namespace

void HostStaged::waitEvent(cudaEvent_t event, const char* what) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s_);
  for (int spins = 0;; ++spins) {
    cudaError_t q = cudaEventQuery(event);
    if (q == cudaSuccess) return;
    if (q != cudaErrorNotReady) checkCuda(q, what);
    if (Clock::now() > deadline) {
      throw TimeoutError(PERSEUS_STR(what << " on device " << device_.device()
                                          << " did not finish within PERSEUS_TIMEOUT=" << timeout_s_
                                          << " s (is the GPU hung?)"));
    }
    if (spins > 4000) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

void* HostStaged::download(Slot& slot, const void* in, size_t bytes) {
  void* host = device_.pinned(0, bytes);
  if (bytes == 0) return host;
  PooledEvent done(*device_.events());
  checkCuda(cudaMemcpyAsync(host, in, bytes, cudaMemcpyDeviceToHost, slot.stream),
            "cudaMemcpyAsync D2H");
  checkCuda(cudaEventRecord(done.get(), slot.stream), "cudaEventRecord");
  waitEvent(done.get(), "device-to-host staging copy");
  return host;
}

void HostStaged::upload(Slot& slot, const void* host, void* out, size_t bytes) {
  if (bytes == 0) return;
  PooledEvent done(*device_.events());
  checkCuda(cudaMemcpyAsync(out, host, bytes, cudaMemcpyHostToDevice, slot.stream),
            "cudaMemcpyAsync H2D");
  checkCuda(cudaEventRecord(done.get(), slot.stream), "cudaEventRecord");
  waitEvent(done.get(), "host-to-device staging copy");
}

void HostStaged::allreduce(collectives::Communicator& comm, Slot& slot, const void* src, void* dst,
                           size_t count, DataType dtype, ReduceOp op, double prescale,
                           double postscale) {
  const size_t elem = dataTypeSize(dtype);
  const size_t bytes = count * elem;
  if (bytes == 0) return;
  char* host = static_cast<char*>(device_.pinned(0, bytes));
  const size_t chunk = std::max(elem, chunk_bytes_ / elem * elem);
  const size_t chunks = (bytes + chunk - 1) / chunk;
  EventPool& pool = *device_.events();
  std::vector<cudaEvent_t> downloaded(chunks);
  for (auto& e : downloaded) e = pool.acquire();
  PooledEvent uploaded(pool);
  PooledEvent started(pool);
  try {
    // The uploads write dst: order them after everything slot.stream waits for (the tensors'
    // ready events).
    checkCuda(cudaEventRecord(started.get(), slot.stream), "cudaEventRecord");
    checkCuda(cudaStreamWaitEvent(slot.h2d_stream, started.get(), 0), "cudaStreamWaitEvent");
    for (size_t k = 0; k < chunks; ++k) {
      const size_t off = k * chunk, n = std::min(chunk, bytes - off);
      checkCuda(cudaMemcpyAsync(host + off, static_cast<const char*>(src) + off, n,
                                cudaMemcpyDeviceToHost, slot.stream),
                "cudaMemcpyAsync D2H");
      checkCuda(cudaEventRecord(downloaded[k], slot.stream), "cudaEventRecord");
    }
    // Chunk k's upload is enqueued only after the host saw chunk k downloaded, so an in-place
    // call (dst == src) never overwrites bytes that are still to be read.
    using Clock = std::chrono::steady_clock;
    auto us = [](Clock::time_point a, Clock::time_point b) {
      return std::chrono::duration<double, std::micro>(b - a).count();
    };
    double d2h_us = 0, reduce_us = 0;
    for (size_t k = 0; k < chunks; ++k) {
      const size_t off = k * chunk, n = std::min(chunk, bytes - off);
      const auto t0 = Clock::now();
      waitEvent(downloaded[k], "device-to-host staging copy");
      const auto t1 = Clock::now();
      void* h = host + off;
      if (prescale != 1.0) kernels::scale(h, n / elem, dtype, prescale);
      collectives::allreduce(comm, h, h, n / elem, dtype, op);
      if (postscale != 1.0) kernels::scale(h, n / elem, dtype, postscale);
      d2h_us += us(t0, t1);
      reduce_us += us(t1, Clock::now());
      checkCuda(cudaMemcpyAsync(static_cast<char*>(dst) + off, h, n, cudaMemcpyHostToDevice,
                                slot.h2d_stream),
                "cudaMemcpyAsync H2D");
    }
    checkCuda(cudaEventRecord(uploaded.get(), slot.h2d_stream), "cudaEventRecord");
    checkCuda(cudaStreamWaitEvent(slot.stream, uploaded.get(), 0), "cudaStreamWaitEvent");
    const auto t2 = Clock::now();
    waitEvent(uploaded.get(), "host-to-device staging copy");
    if (split_ != nullptr) {
      split_->d2h_wait_us += d2h_us;
      split_->reduce_us += reduce_us;
      split_->h2d_wait_us += us(t2, Clock::now());
      ++split_->calls;
    }
  } catch (...) {
    for (auto& e : downloaded) pool.release(e);
    throw;
  }
  for (auto& e : downloaded) pool.release(e);
}

void HostStaged::allgatherv(collectives::Communicator& comm, Slot& slot, const void* in, void* out,
                            const std::vector<size_t>& bytes) {
  const size_t total = std::accumulate(bytes.begin(), bytes.end(), size_t{0});
  void* host_in = download(slot, in, bytes[static_cast<size_t>(comm.rank())]);
  void* host_out = device_.pinned(1, total);
  collectives::allgatherv(comm, host_in, host_out, bytes);
  upload(slot, host_out, out, total);
}

void HostStaged::broadcast(collectives::Communicator& comm, Slot& slot, const void* in, void* out,
                           size_t bytes, int root) {
  void* host = comm.rank() == root ? download(slot, in, bytes) : device_.pinned(0, bytes);
  collectives::broadcast(comm, host, bytes, root);
  upload(slot, host, out, bytes);
}

void HostStaged::alltoallv(collectives::Communicator& comm, Slot& slot, const void* in,
                           const std::vector<size_t>& send_bytes, void* out,
                           const std::vector<size_t>& recv_bytes) {
  const size_t sent = std::accumulate(send_bytes.begin(), send_bytes.end(), size_t{0});
  const size_t received = std::accumulate(recv_bytes.begin(), recv_bytes.end(), size_t{0});
  void* host_in = download(slot, in, sent);
  void* host_out = device_.pinned(1, received);
  collectives::alltoallv(comm, host_in, send_bytes, host_out, recv_bytes);
  upload(slot, host_out, out, received);
}

void HostStaged::reducescatterv(collectives::Communicator& comm, Slot& slot, const void* in,
                                void* out, const std::vector<size_t>& counts, DataType dtype,
                                ReduceOp op, double prescale, double postscale) {
  const size_t elem = dataTypeSize(dtype);
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  void* host_in = download(slot, in, total * elem);
  if (prescale != 1.0) kernels::scale(host_in, total, dtype, prescale);
  const size_t mine = counts[static_cast<size_t>(comm.rank())];
  void* host_out = device_.pinned(1, mine * elem);
  collectives::reducescatterv(comm, host_in, host_out, counts, dtype, op);
  if (postscale != 1.0) kernels::scale(host_out, mine, dtype, postscale);
  upload(slot, host_out, out, mine * elem);
}

}  // namespace perseus::nccl
