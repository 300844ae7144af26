// Handles: the completion side of one submitted operation (c10d's Work). A Handle is created
// at submission, filled by the engine thread, and read by framework threads.
//
// Thread contract
//  - complete() is called once, on the engine thread (or by the submitting thread when the
//    request fails validation). It publishes status, message and outputs, then runs the
//    callback on the calling thread.
//  - poll(), wait(), setCallback() and the getters may be called from any thread; getters of
//    results are valid once done() is true.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/dtype.h"
#include "common/status.h"
#include "engine/host_buffer_pool.h"

namespace perseus::backends {
class GpuWork;
}

namespace perseus::engine {

// An output that the library allocated (allgather, alltoall, reducescatter); owned by the
// handle, freed when the handle is released.
struct OwnedTensor {
  DataType dtype = DataType::kFloat32;
  std::vector<int64_t> shape;
  HostBufferPool::Buffer data;  // Note [Recycled outputs]
  size_t bytes = 0;
  // CUDA outputs: device memory from GpuBackend::allocate() on CUDA ordinal `device`
  // (data stays null); device == -1 for host outputs.
  std::shared_ptr<void> device_data;
  int device = -1;

  void allocate(DataType t, std::vector<int64_t> s);
  void* ptr() const { return device >= 0 ? device_data.get() : data.get(); }
};

class Handle {
 public:
  using Callback = std::function<void(StatusCode, const std::string&)>;

  using Name = std::shared_ptr<const std::string>;
  Handle(int64_t id, Name name) : id_(id), shared_name_(std::move(name)) {}
  Handle(int64_t id, std::string name) : id_(id), own_name_(std::move(name)) {}
  // A handle with an id that is unique in the process, across engines (the C API may
  // re-initialise), so a stale id never finds another engine's handle. Stamps the submission.
  static std::shared_ptr<Handle> create(std::string name);
  // The same with a name shared with its owner (a posted slot's): no copy per operation.
  // `timed` false: a blocking call's handle, whose times nobody can ask for. Its submission is
  // stamped with the coarse clock (ticks of a few ms: enough for patience and stall warnings,
  // and cheaper to read than the precise clock, which a virtual machine's clock source can make
  // slow), its completion not at all.
  static std::shared_ptr<Handle> create(Name name, bool timed = true);

  int64_t id() const { return id_; }
  const std::string& name() const { return shared_name_ ? *shared_name_ : own_name_; }

  bool done() const { return done_.load(std::memory_order_acquire); }
  // Spins for `spin_us`, then blocks. Returns false if `timeout_s` (>= 0) passed first.
  bool wait(double timeout_s, int64_t spin_us = 0) const;
  StatusCode status() const { return status_; }
  const std::string& message() const { return message_; }
  // steady_clock (CLOCK_MONOTONIC) nanoseconds of submission (create()) and of completion
  // (0 until done): the engine's own view of an operation's time, for benchmarks and traces.
  int64_t submittedNs() const { return submitted_ns_; }
  int64_t completedNs() const { return completed_ns_; }

  // Runs `cb` once: at once on this thread if already done, else on the completing thread.
  void setCallback(Callback cb);

  // Engine side. Outputs/splits/join rank are written before complete() publishes them.
  std::vector<OwnedTensor>& outputs() { return outputs_; }
  std::vector<int64_t>& receivedSplits() { return received_splits_; }
  void setIntResult(int32_t v) { int_result_ = v; }
  void complete(StatusCode status, const std::string& message);
  void fail(const Error& e) { complete(e.code(), e.what()); }

  const std::vector<OwnedTensor>& outputs() const { return outputs_; }
  const std::vector<int64_t>& receivedSplits() const { return received_splits_; }
  // join: the last rank to join; add process set: the new set's id.
  int32_t intResult() const { return int_result_; }

  // CUDA operations. The engine thread publishes the enqueued GPU work once (before the GPU
  // finished); streamWait() (any thread) waits on the host only until that happened or the
  // handle completed (spinning for `spin_us` first, as wait() does), then makes `stream` wait
  // for the work on the GPU. Throws the handle's error if it failed, UnsupportedError for a
  // handle that never gets GPU work (CPU ops).
  void setGpuWork(std::vector<std::shared_ptr<backends::GpuWork>> works);
  // The published GPU work, which never changes after setGpuWork(): for its caller's thread,
  // and for any thread that saw streamReady() with the handle not done.
  const std::vector<std::shared_ptr<backends::GpuWork>>& gpuWorks() const { return gpu_works_; }
  void streamWait(void* stream, int64_t spin_us = 0) const;
  // True once streamWait() no longer waits on the host: the GPU work is published, or the
  // handle is done.
  bool streamReady() const { return gpu_work_published_.load(std::memory_order_acquire) || done(); }

 private:
  // Stamps the submission (create()'s `timed`).
  void stamp(bool timed);

  const int64_t id_;
  // The name: shared with its owner, or the handle's own (one allocation fewer per handle).
  const Name shared_name_;
  const std::string own_name_;
  std::atomic<bool> done_{false};
  StatusCode status_ = StatusCode::kOk;
  std::string message_;
  std::vector<OwnedTensor> outputs_;
  std::vector<int64_t> received_splits_;
  int32_t int_result_ = -1;
  int64_t submitted_ns_ = 0;
  int64_t completed_ns_ = 0;  // written before done_ is published
  bool timed_ = true;
  // Written once, under mu_, before has_gpu_work_; read-only from then on.
  std::vector<std::shared_ptr<backends::GpuWork>> gpu_works_;
  bool has_gpu_work_ = false;                    // guarded by mu_
  std::atomic<bool> gpu_work_published_{false};  // has_gpu_work_, for streamWait()'s spin

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  Callback callback_;
  bool completing_ = false;
};

// Handles by id, for the C API. Ids come from the engine and are never reused by it.
//
// Ids are handed out in sequence, so the live ones of a program (its handles not yet released)
// are almost always a window narrower than the ring: each sits in the ring's place id mod
// kRingSize, one cache line away from the last, with no hashing and no node. An id whose
// place is taken (more than kRingSize live, or a handle kept far longer than its successors)
// goes to the overflow map.
class HandleTable {
 public:
  HandleTable();
  void insert(std::shared_ptr<Handle> handle);
  std::shared_ptr<Handle> find(int64_t id) const;  // nullptr if unknown or released
  bool release(int64_t id);
  size_t size() const;

 private:
  static constexpr size_t kRingSize = size_t{1} << 12;
  struct Place {
    int64_t id = 0;  // 0: free (ids start at 1)
    std::shared_ptr<Handle> handle;
  };
  mutable std::mutex mu_;
  std::vector<Place> ring_;
  std::unordered_map<int64_t, std::shared_ptr<Handle>> overflow_;
  size_t live_ = 0;
};

}  // namespace perseus::engine
