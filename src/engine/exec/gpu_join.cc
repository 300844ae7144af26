#include "engine/exec/gpu_join.h"

#include "engine/exec/gpu_tensors.h"

namespace perseus::engine {

char* JoinedStandIns::zeros(size_t bytes) {
  scratch_.push_back(backend_->zeros(device_(), bytes));
  return static_cast<char*>(scratch_.back().get());
}

backends::GpuTensor JoinedStandIns::tensor(const std::string& name, size_t bytes, size_t count) {
  return scratchTensor(name, zeros(bytes), count);
}

void JoinedStandIns::finish() {
  for (const auto& work : works_) work->wait();
  clear();
}

void JoinedStandIns::clear() {
  works_.clear();
  scratch_.clear();
}

}  // namespace perseus::engine
