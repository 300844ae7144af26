// A joined rank's part in the CUDA collectives that the others still run (Note [Join on the
// GPU], gpu_executor.cc): device memory of its own on the device join() named, and the works
// that use it, which the rank waits for before the group returns.
//
// Thread contract: the GPU executor, under the cycle lock.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backends/gpu_backend.h"

namespace perseus::engine {

class JoinedStandIns {
 public:
  // `backend` outlives this; `device` gives the joined rank's CUDA ordinal.
  JoinedStandIns(backends::GpuBackend* backend, std::function<int()> device)
      : backend_(backend), device_(std::move(device)) {}

  int device() const { return device_(); }
  // `bytes` of zeros on the joined device, kept until finish().
  char* zeros(size_t bytes);
  // A tensor named `name` over `bytes` of zeros, `count` elements, kept until finish().
  backends::GpuTensor tensor(const std::string& name, size_t bytes, size_t count);
  // A work that uses this group's stand-ins: finish() waits for it.
  void await(std::shared_ptr<backends::GpuWork> work) { works_.push_back(std::move(work)); }
  // Waits for every awaited work, then frees the stand-ins.
  void finish();
  // Drops what a failed group left.
  void clear();

 private:
  backends::GpuBackend* const backend_;
  const std::function<int()> device_;
  std::vector<std::shared_ptr<void>> scratch_;
  std::vector<std::shared_ptr<backends::GpuWork>> works_;
};

}  // namespace perseus::engine
