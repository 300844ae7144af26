// How the GPU executor hands an entry's tensors to the GpuBackend: views of the framework's
// device memory, library-owned outputs (Note [GPU completion], gpu_executor.cc), and the
// works that complete an entry.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/gpu_backend.h"
#include "engine/entry.h"
#include "fusion/tensor_groups.h"

namespace perseus::engine {

// Tensor `t` of entry `e`, whose metadata is `m`.
backends::GpuTensor entryTensor(const Entry& e, size_t t, const TensorMeta& m);
// `count` elements at `p`, in place.
backends::GpuTensor scratchTensor(const std::string& name, void* p, size_t count);
// Device memory for output `t` of `count` library-owned outputs of `e`, of `shape`, held by
// the entry's handle.
void* allocateOutput(backends::GpuBackend& backend, Entry* e, size_t t, size_t count, DataType dt,
                     std::vector<int64_t> shape);
// Appends `work` once to each entry of `g` that this rank has.
void attachWork(const fusion::FusionGroup& g, const std::vector<Entry*>& es,
                const std::shared_ptr<backends::GpuWork>& work);

}  // namespace perseus::engine
