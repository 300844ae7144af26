#include "engine/exec/gpu_tensors.h"

namespace perseus::engine {

backends::GpuTensor entryTensor(const Entry& e, size_t t, const TensorMeta& m) {
  backends::GpuTensor gt;
  gt.name = e.request.name;
  gt.input = e.inputs[t];
  gt.output = e.outputs[t];
  gt.count = static_cast<size_t>(m.numElements());
  gt.ready = e.ready;
  return gt;
}

backends::GpuTensor scratchTensor(const std::string& name, void* p, size_t count) {
  backends::GpuTensor gt;
  gt.name = name;
  gt.input = gt.output = p;
  gt.count = count;
  return gt;
}

void* allocateOutput(backends::GpuBackend& backend, Entry* e, size_t t, size_t count, DataType dt,
                     std::vector<int64_t> shape) {
  auto& outs = e->handle->outputs();
  if (outs.size() < count) outs.resize(count);
  OwnedTensor& out = outs[t];
  out.dtype = dt;
  out.shape = std::move(shape);
  int64_t n = 1;
  for (int64_t d : out.shape) n *= d;
  out.bytes = static_cast<size_t>(n) * dataTypeSize(dt);
  out.device = e->device;
  out.device_data = backend.allocate(e->device, out.bytes > 0 ? out.bytes : 1);
  return out.device_data.get();
}

void attachWork(const fusion::FusionGroup& g, const std::vector<Entry*>& es,
                const std::shared_ptr<backends::GpuWork>& work) {
  Entry* last = nullptr;
  for (const fusion::FusionItem& it : g.items) {
    Entry* e = es[it.response];
    if (e != nullptr && e != last) e->gpu_works.push_back(work);  // grouped items are adjacent
    last = e;
  }
}

}  // namespace perseus::engine
