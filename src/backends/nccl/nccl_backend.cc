#include "backends/nccl/nccl_backend.h"

#include <algorithm>

#include "backends/nccl/cuda_util.h"
#include "backends/nccl/nccl_backend_impl.h"
#include "common/status.h"

namespace perseus::nccl {

std::string describe(const char* op, const std::vector<GpuTensor>& tensors) {
  std::string s;
  if (tensors.size() == 1) {  // built for every work: one allocation
    const std::string_view name = tensors[0].name;
    s.reserve(std::char_traits<char>::length(op) + name.size() + 13);
    s.append(op).append(" of tensor '").append(name).append("'");
    return s;
  }
  s = std::string(op) + " of ";
  s += std::to_string(tensors.size()) + " tensors (";
  for (size_t i = 0; i < tensors.size() && i < 3; ++i) {
    s += i ? ", '" : "'";
    s.append(tensors[i].name).append("'");
  }
  return s + (tensors.size() > 3 ? ", ...)" : ")");
}

std::string NcclBackend::dataPlane(collectives::Communicator& comm, int device) {
  auto it = comms_.find(Key{comm.members(), device});
  if (it == comms_.end()) return "";
  return it->second->staged ? "host-staged" : "nccl";
}

std::shared_ptr<backends::GpuEvent> NcclBackend::recordReady(int device, void* stream) {
  requireDevice(device);
  auto pool = context(device).events();
  DeviceGuard guard(device);
  auto event = std::make_shared<CudaEvent>(pool, pool->acquire());
  event->record(static_cast<cudaStream_t>(stream), "cudaEventRecord (tensor ready)");
  return event;
}

std::shared_ptr<void> NcclBackend::allocate(int device, size_t bytes) {
  requireDevice(device);
  return context(device).outputs()->acquire(bytes);
}

std::shared_ptr<void> NcclBackend::zeros(int device, size_t bytes) {
  std::shared_ptr<void> block = allocate(device, bytes > 0 ? bytes : 1);
  DeviceGuard guard(device);
  // Synchronous: the block is zero before any slot stream of any later call reads it.
  checkCuda(cudaMemset(block.get(), 0, bytes), "cudaMemset (join zeros)");
  checkCuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize (join zeros)");
  return block;
}

int NcclBackend::defaultDevice(int local_rank) {
  const int count = visibleDeviceCount();
  return local_rank % count;
}

int NcclBackend::currentDevice() {
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();  // a caller's next CUDA call must not see this error
    return -1;
  }
  return device;
}

void NcclBackend::restoreDevice(int device) {
  // Set only when it changed: cudaGetDevice reads the thread's state, cudaSetDevice does more.
  if (device < 0 || currentDevice() == device) return;
  if (cudaSetDevice(device) != cudaSuccess) (void)cudaGetLastError();
}

NcclBackend::~NcclBackend() {
  // A work still running on a communicator whose peers are gone would make the destroy and
  // the stream synchronisation in ~DeviceContext wait forever: abort those communicators.
  if (hasUnfinishedWork()) {
    for (auto& entry : comms_) entry.second->abort();
  }
  comms_.clear();
  devices_.clear();
}

bool NcclBackend::hasUnfinishedWork() {
  std::lock_guard<std::mutex> lock(pending_mutex_);
  for (auto& w : pending_) {
    if (auto work = w.lock()) {
      try {
        if (!work->poll()) return true;
      } catch (...) {
        return true;
      }
    }
  }
  return false;
}

DeviceContext& NcclBackend::context(int device) {
  std::lock_guard<std::mutex> lock(devices_mutex_);
  auto& dc = devices_[device];
  if (!dc) dc = std::make_unique<DeviceContext>(device, options_.params);
  return *dc;
}

NcclBackend::Call NcclBackend::begin(collectives::Communicator& comm, int device,
                                     const std::vector<const GpuTensor*>& inputs) {
  requireDevice(device);
  Call call{};
  call.dc = &context(device);
  checkCuda(cudaSetDevice(device), "cudaSetDevice");
  auto& state = comms_[Key{comm.members(), device}];
  if (!state) state = CommState::create(comm, device, options_);
  call.state = state.get();
  call.slot = &call.dc->nextSlot();
  call.stream = call.slot->stream;
  for (const GpuTensor* t : inputs) {
    if (!t->ready) continue;
    auto* event = static_cast<CudaEvent*>(t->ready.get());
    if (event->device() != device) {
      throw InvalidArgumentError(
          PERSEUS_STR("tensor '" << t->name << "' was made ready on device " << event->device()
                                 << " but the collective runs on device " << device));
    }
    checkCuda(cudaStreamWaitEvent(call.stream, event->get(), 0),
              "cudaStreamWaitEvent (tensor ready)");
  }
  return call;
}

void NcclBackend::track(const std::shared_ptr<CudaWork>& work) {
  std::lock_guard<std::mutex> lock(pending_mutex_);
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(),
                                [](const std::weak_ptr<CudaWork>& w) { return w.expired(); }),
                 pending_.end());
  pending_.push_back(work);
}

std::shared_ptr<GpuWork> NcclBackend::finish(const Call& call, std::string what,
                                             std::vector<std::shared_ptr<NcclComm>> comms,
                                             const int* nan_host, std::vector<std::string> names) {
  auto work = std::make_shared<CudaWork>(call.dc->events(), std::move(what),
                                         options_.params.timeout_s, std::move(comms));
  if (nan_host != nullptr) work->setNanCheck(nan_host, std::move(names));
  work->recordDone(call.stream);
  track(work);
  return work;
}

void NcclBackend::abort(const std::exception_ptr& reason) {
  {
    std::lock_guard<std::mutex> lock(pending_mutex_);
    for (auto& w : pending_) {
      if (auto work = w.lock()) work->fail(reason);
    }
    pending_.clear();
  }
  for (auto& entry : comms_) entry.second->abort();
  // Later collectives on these sets build fresh communicators (every rank aborts alike).
  comms_.clear();
}

void NcclBackend::close(const std::exception_ptr& reason) {
  if (hasUnfinishedWork()) {
    abort(reason);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(pending_mutex_);
    pending_.clear();
  }
  comms_.clear();
}

std::unique_ptr<backends::GpuBackend> createNcclBackend(
    const backends::GpuBackendOptions& options) {
  return std::make_unique<NcclBackend>(options);
}

}  // namespace perseus::nccl
