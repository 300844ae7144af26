// One submitted operation as the engine thread holds it while negotiating and executing.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "backends/gpu_backend.h"
#include "engine/handle.h"
#include "negotiation/request.h"

namespace perseus::engine {

struct Entry {
  Request request;
  // Per tensor: the caller's input and output buffers. A null output means the library
  // allocates it in the handle (allgather, alltoall, reducescatter).
  std::vector<const void*> inputs;
  std::vector<void*> outputs;
  std::vector<int64_t> splits;  // alltoall, empty for an even split
  int device = -1;              // PERSEUS_DEVICE_CPU or a CUDA ordinal
  void* cuda_stream = nullptr;  // the producer's stream (CUDA only)
  // CUDA: "the producer finished writing the inputs", recorded at submission.
  std::shared_ptr<backends::GpuEvent> ready;
  std::shared_ptr<Handle> handle;
  std::chrono::steady_clock::time_point submitted;

  // Engine-thread bookkeeping.
  int cache_bit = -1;      // >= 0 while waiting as a cache hit
  bool sent = false;       // sent to the coordinator, waiting for its response
  bool announced = false;  // non-global set: reported to the global cross-set check
  bool stall_reported = false;
  size_t tensors_left = 0;  // tensors of this cycle's response still to run
  StatusCode error = StatusCode::kOk;
  std::string error_message;
  // CUDA: the enqueued GPU work of every group that held one of this entry's tensors.
  std::vector<std::shared_ptr<backends::GpuWork>> gpu_works;
};

}  // namespace perseus::engine
