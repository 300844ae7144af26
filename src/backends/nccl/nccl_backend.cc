#include "backends/nccl/nccl_backend.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <numeric>

#include "backends/nccl/comm_state.h"
#include "backends/nccl/cuda_util.h"
#include "backends/nccl/device_context.h"
#include "backends/nccl/gpu_work.h"
#include "backends/nccl/host_staged.h"
#include "backends/nccl/nccl_api.h"
#include "backends/nccl/nccl_types.h"
#include "common/logging.h"
#include "common/status.h"
#include "fusion/buffer_rounds.h"
#include "kernels/cuda/fusion_kernels.h"
#include "kernels/reduce.h"

namespace perseus::nccl {
namespace {

using backends::GpuBatch;
using backends::GpuTensor;
using backends::GpuWork;
using kernels::cuda::batchedCopy;
using kernels::cuda::CopyEntry;

// Auto hierarchical allreduce only for large buffers: below this, NCCL's own tree/ring across
// hosts is as fast and the two extra local steps cost latency.
constexpr size_t kHierarchicalMinBytes = size_t{16} << 20;
// Host-staged single tensors up to this size are scaled on the host (H200: 4 B took 25 us with
// host scaling, 37 us with a postscale kernel; 64 MiB spent ~3 ms more scaling on the host).
constexpr size_t kHostScaleMaxBytes = size_t{64} << 10;

const char* at(const void* p, size_t bytes) { return static_cast<const char*>(p) + bytes; }
char* at(void* p, size_t bytes) { return static_cast<char*>(p) + bytes; }

std::string describe(const char* op, const std::vector<GpuTensor>& tensors) {
  std::string s = std::string(op) + " of ";
  if (tensors.size() == 1) return s + "tensor '" + tensors[0].name + "'";
  s += std::to_string(tensors.size()) + " tensors (";
  for (size_t i = 0; i < tensors.size() && i < 3; ++i)
    s += (i ? ", '" : "'") + tensors[i].name + "'";
  return s + (tensors.size() > 3 ? ", ...)" : ")");
}

class NcclBackend : public backends::GpuBackend {
 public:
  explicit NcclBackend(const backends::GpuBackendOptions& options) : options_(options) {}
  ~NcclBackend() override;

  std::string dataPlane(collectives::Communicator& comm, int device) override {
    auto it = comms_.find(Key{comm.members(), device});
    if (it == comms_.end()) return "";
    return it->second->staged ? "host-staged" : "nccl";
  }

  std::shared_ptr<backends::GpuEvent> recordReady(int device, void* stream) override {
    requireDevice(device);
    auto pool = context(device).events();
    DeviceGuard guard(device);
    auto event = std::make_shared<CudaEvent>(pool, pool->acquire());
    checkCuda(cudaEventRecord(event->get(), static_cast<cudaStream_t>(stream)),
              "cudaEventRecord (tensor ready)");
    return event;
  }

  std::shared_ptr<void> allocate(int device, size_t bytes) override {
    requireDevice(device);
    return context(device).outputs()->acquire(bytes);
  }

  std::shared_ptr<void> zeros(int device, size_t bytes) override {
    std::shared_ptr<void> block = allocate(device, bytes > 0 ? bytes : 1);
    DeviceGuard guard(device);
    // Synchronous: the block is zero before any slot stream of any later call reads it.
    checkCuda(cudaMemset(block.get(), 0, bytes), "cudaMemset (join zeros)");
    checkCuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize (join zeros)");
    return block;
  }

  int defaultDevice(int local_rank) override {
    const int count = visibleDeviceCount();
    return local_rank % count;
  }

  std::shared_ptr<GpuWork> allreduce(collectives::Communicator& comm, const GpuBatch& batch,
                                     ReduceOp op, double prescale, double postscale) override;
  std::shared_ptr<GpuWork> allgatherv(collectives::Communicator& comm, int device,
                                      const GpuTensor& in, void* out,
                                      const std::vector<size_t>& bytes) override;
  std::shared_ptr<GpuWork> broadcast(collectives::Communicator& comm, int device,
                                     const GpuTensor& t, size_t bytes, int root) override;
  std::shared_ptr<GpuWork> alltoallv(collectives::Communicator& comm, int device,
                                     const GpuTensor& in, const std::vector<size_t>& send_bytes,
                                     void* out, const std::vector<size_t>& recv_bytes) override;
  std::shared_ptr<GpuWork> reducescatterv(collectives::Communicator& comm, int device,
                                          DataType dtype, const GpuTensor& in, void* out,
                                          const std::vector<size_t>& counts, ReduceOp op,
                                          double prescale, double postscale) override;
  void abort(const std::exception_ptr& reason) override;
  void close(const std::exception_ptr& reason) override;

 private:
  using Key = std::pair<std::vector<int>, int>;

  // Everything one collective needs, set up by begin(): device current, slot chosen, the slot
  // stream waiting for the inputs.
  struct Call {
    DeviceContext* dc;
    CommState* state;
    Slot* slot;
    cudaStream_t stream;
  };

  DeviceContext& context(int device);
  Call begin(collectives::Communicator& comm, int device,
             const std::vector<const GpuTensor*>& inputs);
  std::shared_ptr<GpuWork> finish(const Call& call, std::string what,
                                  std::vector<std::shared_ptr<NcclComm>> comms,
                                  const int* nan_host = nullptr,
                                  std::vector<std::string> names = {});
  void fusedRound(const Call& call, collectives::Communicator& comm, const GpuBatch& batch,
                  const fusion::FusionRound& round, DataType wire, ReduceOp op, double prescale,
                  double postscale, int* nan_flag, bool hierarchical, bool mixed);
  void hierarchicalAllreduce(const Call& call, void* buf, size_t count, DataType wire, ReduceOp op,
                             bool mixed);
  bool useHierarchical(const CommState& s, size_t bytes);
  // Adasum over several ranks: host-staged, each tensor whole (Note [Adasum]).
  std::shared_ptr<GpuWork> adasumStaged(collectives::Communicator& comm, const GpuBatch& batch,
                                        double prescale, double postscale);
  // Note [World size one]: the work of a no-op allreduce, or nullptr when it is not one.
  std::shared_ptr<GpuWork> worldOneInPlace(collectives::Communicator& comm, const GpuBatch& batch,
                                           double prescale, double postscale);
  const NcclApi& api() const { return *ncclApi(); }
  size_t stagedChunk() const { return static_cast<size_t>(options_.params.staged_chunk_bytes); }
  // Keeps a weak reference to `work` (pending_: for abort() and the destructor), dropping
  // expired ones.
  void track(const std::shared_ptr<CudaWork>& work);
  // Whether some tracked work has not finished (or failed when polled).
  bool hasUnfinishedWork();

  backends::GpuBackendOptions options_;
  std::mutex devices_mutex_;  // recordReady()/allocate() come from framework threads
  std::map<int, std::unique_ptr<DeviceContext>> devices_;
  std::map<Key, std::unique_ptr<CommState>> comms_;  // destroyed before devices_
  std::mutex pending_mutex_;
  std::vector<std::weak_ptr<CudaWork>> pending_;
  bool warned_hierarchical_ = false;
};

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

bool NcclBackend::useHierarchical(const CommState& s, size_t bytes) {
  const std::string& mode = options_.params.hierarchical_allreduce;
  if (mode == "0" || s.staged) return false;
  if (!s.uniform) {
    if (mode == "1" && !warned_hierarchical_) {
      warned_hierarchical_ = true;
      PERSEUS_LOG(WARNING, kCuda) << "PERSEUS_HIERARCHICAL_ALLREDUCE=1 ignored for " << s.label
                                  << ": hosts hold different numbers of its ranks";
    }
    return false;
  }
  if (mode == "1") return true;
  return s.hosts > 1 && s.local_size > 1 && bytes >= kHierarchicalMinBytes;
}

// Note [Hierarchical allreduce]
// The buffer (padded to a multiple of the local size; the fusion buffer has room) is
// reduce-scattered within the host, each rank's 1/L part is allreduced across hosts with the
// ranks of the same local index, and the parts are allgathered within the host again. All
// three run on the slot stream in device memory; nothing is staged through the host. In mixed
// mode (PERSEUS_ALLREDUCE_DTYPE=2) only the cross-host part travels as float16.
void NcclBackend::hierarchicalAllreduce(const Call& call, void* buf, size_t count, DataType wire,
                                        ReduceOp op, bool mixed) {
  CommState& s = *call.state;
  const int l = s.local->size();
  const size_t es = dataTypeSize(wire);
  const size_t chunk = (count + static_cast<size_t>(l) - 1) / static_cast<size_t>(l);
  void* part = at(buf, static_cast<size_t>(s.local->rank()) * chunk * es);
  const ncclDataType_t type = ncclType(wire);
  const ncclRedOp_t red = ncclOp(op, wire);
  s.local->run("ncclReduceScatter (within host)", [&] {
    return api().reduceScatter(buf, part, chunk, type, red, s.local->get(), call.stream);
  });
  if (s.cross->size() > 1) {
    if (mixed && wire == DataType::kFloat32) {
      void* half = call.dc->aux(*call.slot);
      CopyEntry down{part, half, chunk, 0};
      batchedCopy(&down, 1, DataType::kFloat32, DataType::kFloat16, 1.0, nullptr, call.stream);
      s.cross->run("ncclAllReduce (across hosts, float16)", [&] {
        return api().allReduce(half, half, chunk, ncclFloat16, ncclOp(op, DataType::kFloat16),
                               s.cross->get(), call.stream);
      });
      CopyEntry up{half, part, chunk, 0};
      batchedCopy(&up, 1, DataType::kFloat16, DataType::kFloat32, 1.0, nullptr, call.stream);
    } else {
      s.cross->run("ncclAllReduce (across hosts)", [&] {
        return api().allReduce(part, part, chunk, type, red, s.cross->get(), call.stream);
      });
    }
  }
  s.local->run("ncclAllGather (within host)", [&] {
    return api().allGather(part, buf, chunk, type, s.local->get(), call.stream);
  });
}

void NcclBackend::fusedRound(const Call& call, collectives::Communicator& comm,
                             const GpuBatch& batch, const fusion::FusionRound& round, DataType wire,
                             ReduceOp op, double prescale, double postscale, int* nan_flag,
                             bool hierarchical, bool mixed) {
  const size_t es = dataTypeSize(batch.dtype), ws = dataTypeSize(wire);
  void* fusion = call.slot->fusion;
  std::vector<CopyEntry> in, out;
  in.reserve(round.pieces.size());
  out.reserve(round.pieces.size());
  for (const auto& p : round.pieces) {
    const GpuTensor& t = batch.tensors[p.tensor];
    in.push_back(CopyEntry{at(t.input, p.offset * es), at(fusion, p.buffer_offset * ws), p.count,
                           static_cast<int>(p.tensor)});
    out.push_back(CopyEntry{at(fusion, p.buffer_offset * ws), at(t.output, p.offset * es), p.count,
                            static_cast<int>(p.tensor)});
  }
  batchedCopy(in.data(), static_cast<int>(in.size()), batch.dtype, wire, prescale, nan_flag,
              call.stream);
  CommState& s = *call.state;
  if (s.staged) {
    HostStaged(*call.dc, options_.params.timeout_s, stagedChunk())
        .allreduce(comm, *call.slot, fusion, fusion, round.count, wire, op, 1.0, 1.0);
  } else if (hierarchical) {
    hierarchicalAllreduce(call, fusion, round.count, wire, op, mixed);
  } else {
    s.flat->run("ncclAllReduce", [&] {
      return api().allReduce(fusion, fusion, round.count, ncclType(wire), ncclOp(op, wire),
                             s.flat->get(), call.stream);
    });
  }
  batchedCopy(out.data(), static_cast<int>(out.size()), wire, batch.dtype, postscale, nullptr,
              call.stream);
}

std::shared_ptr<GpuWork> NcclBackend::allreduce(collectives::Communicator& comm,
                                                const GpuBatch& batch, ReduceOp op, double prescale,
                                                double postscale) {
  if (op == ReduceOp::kAverage) {
    op = ReduceOp::kSum;
    postscale /= comm.size();
  }
  prescale = kernels::gpuScaleFactor(batch.dtype, prescale);
  postscale = kernels::gpuScaleFactor(batch.dtype, postscale);
  if (op == ReduceOp::kAdasum) {
    if (comm.size() > 1) return adasumStaged(comm, batch, prescale, postscale);
    op = ReduceOp::kSum;  // the Adasum of one rank's tensor is that tensor
  }
  if (auto work = worldOneInPlace(comm, batch, prescale, postscale)) return work;
  std::vector<const GpuTensor*> inputs;
  std::vector<size_t> counts;
  size_t total = 0;
  for (const auto& t : batch.tensors) {
    inputs.push_back(&t);
    counts.push_back(t.count);
    total += t.count;
  }
  Call call = begin(comm, batch.device, inputs);
  CommState& s = *call.state;
  const DataType dtype = batch.dtype;
  DataType wire = dtype;
  bool mixed = false;
  if (dtype == DataType::kFloat32 && options_.params.allreduce_dtype == 0)
    wire = DataType::kFloat16;
  if (dtype == DataType::kFloat32 && options_.params.allreduce_dtype == 2) mixed = true;
  const bool nan = options_.params.allreduce_nancheck && isFloatingPoint(dtype);
  int* nan_flag = nan ? call.slot->nan_flag : nullptr;
  if (nan) checkCuda(cudaMemsetAsync(nan_flag, 0x7F, sizeof(int), call.stream), "cudaMemsetAsync");

  const bool hierarchical = useHierarchical(s, total * dataTypeSize(dtype));
  if (hierarchical) s.ensureHierarchical();
  const bool direct = batch.tensors.size() == 1 && wire == dtype && !hierarchical;
  if (direct && total > 0) {
    // One tensor: no fusion copies. NCCL reads the input and writes the output itself.
    const GpuTensor& t = batch.tensors[0];
    if (s.staged && !nan && total * dataTypeSize(dtype) <= kHostScaleMaxBytes) {
      // Small and staged: scaling on the host is cheaper than a kernel launch and its wait.
      HostStaged(*call.dc, options_.params.timeout_s, stagedChunk())
          .allreduce(comm, *call.slot, t.input, t.output, t.count, dtype, op, prescale, postscale);
    } else {
      // Scales run on the GPU (an extra pass there costs microseconds; on the host, milliseconds).
      const void* src = t.input;
      if (prescale != 1.0 || nan) {
        CopyEntry e{t.input, t.output, t.count, 0};
        batchedCopy(&e, 1, dtype, dtype, prescale, nan_flag, call.stream);
        src = t.output;
      }
      if (s.staged) {
        HostStaged(*call.dc, options_.params.timeout_s, stagedChunk())
            .allreduce(comm, *call.slot, src, t.output, t.count, dtype, op, 1.0, 1.0);
      } else {
        s.flat->run("ncclAllReduce", [&] {
          return api().allReduce(src, t.output, t.count, ncclType(dtype), ncclOp(op, dtype),
                                 s.flat->get(), call.stream);
        });
      }
      if (postscale != 1.0) {
        CopyEntry e{t.output, t.output, t.count, 0};
        batchedCopy(&e, 1, dtype, dtype, postscale, nullptr, call.stream);
      }
    }
  } else {
    // Hierarchical rounds leave room for padding to a multiple of the local size.
    const size_t align = hierarchical ? 64 * static_cast<size_t>(s.local_size) : 64;
    size_t capacity = call.dc->fusionBytes() / align * align;
    for (const auto& round :
         fusion::planRounds(counts, dataTypeSize(wire), capacity, std::min(align, capacity))) {
      fusedRound(call, comm, batch, round, wire, op, prescale, postscale, nan_flag, hierarchical,
                 mixed);
    }
  }

  const int* nan_host = nullptr;
  std::vector<std::string> names;
  if (nan) {
    Slot& slot = *call.slot;
    int* host = slot.nan_host + (slot.nan_next++ % DeviceContext::kNanRing);
    *host = kNoNonFinite;
    checkCuda(cudaMemcpyAsync(host, nan_flag, sizeof(int), cudaMemcpyDeviceToHost, call.stream),
              "cudaMemcpyAsync (NaN flag)");
    nan_host = host;
    for (const auto& t : batch.tensors) names.push_back(t.name);
  }
  std::vector<std::shared_ptr<NcclComm>> comms;
  if (!s.staged)
    comms = hierarchical ? std::vector<std::shared_ptr<NcclComm>>{s.local, s.cross}
                         : std::vector<std::shared_ptr<NcclComm>>{s.flat};
  return finish(call, describe("allreduce", batch.tensors), std::move(comms), nan_host,
                std::move(names));
}

// NCCL has no Adasum: the tensors go through host memory, as Horovod's builds without NCCL
// Adasum copy GPU tensors to the CPU, and the host algorithm combines each one whole (one
// chunk: the coefficients need the whole tensor's dot products).
std::shared_ptr<GpuWork> NcclBackend::adasumStaged(collectives::Communicator& comm,
                                                   const GpuBatch& batch, double prescale,
                                                   double postscale) {
  std::vector<const GpuTensor*> inputs;
  for (const auto& t : batch.tensors) inputs.push_back(&t);
  Call call = begin(comm, batch.device, inputs);
  const size_t es = dataTypeSize(batch.dtype);
  for (const auto& t : batch.tensors) {
    HostStaged(*call.dc, options_.params.timeout_s, std::max<size_t>(es, t.count * es))
        .allreduce(comm, *call.slot, t.input, t.output, t.count, batch.dtype, ReduceOp::kAdasum,
                   prescale, postscale);
  }
  return finish(call, describe("allreduce", batch.tensors), {});
}

// Note [World size one]
// An allreduce over a set of one rank, in place, with nothing to scale, cast or check, leaves
// the tensor as it is: NCCL itself moves no bytes for it (its one-rank path copies only when
// the output differs from the input). So the work is complete when the input is ready: the
// tensor's ready event (recorded on the producer's stream at submission) is the work's
// completion event, and the slot stream, the NCCL call and a second event are skipped. Every
// other case (several tensors, out of place, scales, casts, the NaN check) runs as usual.
std::shared_ptr<GpuWork> NcclBackend::worldOneInPlace(collectives::Communicator& comm,
                                                      const GpuBatch& batch, double prescale,
                                                      double postscale) {
  if (comm.size() != 1 || batch.tensors.size() != 1) return nullptr;
  const GpuTensor& t = batch.tensors[0];
  const bool nan = options_.params.allreduce_nancheck && isFloatingPoint(batch.dtype);
  const bool cast = batch.dtype == DataType::kFloat32 && options_.params.allreduce_dtype == 0;
  if (t.input != t.output || !t.ready || prescale != 1.0 || postscale != 1.0 || nan || cast) {
    return nullptr;
  }
  auto ready = std::static_pointer_cast<CudaEvent>(t.ready);
  if (ready->device() != batch.device) return nullptr;  // begin() reports the mismatch
  auto work = std::make_shared<CudaWork>(context(batch.device).events(),
                                         describe("allreduce", batch.tensors),
                                         options_.params.timeout_s, std::move(ready));
  track(work);
  return work;
}

std::shared_ptr<GpuWork> NcclBackend::allgatherv(collectives::Communicator& comm, int device,
                                                 const GpuTensor& in, void* out,
                                                 const std::vector<size_t>& bytes) {
  Call call = begin(comm, device, {&in});
  CommState& s = *call.state;
  if (s.staged) {
    HostStaged(*call.dc, options_.params.timeout_s, stagedChunk())
        .allgatherv(comm, *call.slot, in.input, out, bytes);
    return finish(call, describe("allgather", {in}), {});
  }
  const bool equal =
      std::all_of(bytes.begin(), bytes.end(), [&](size_t b) { return b == bytes[0]; });
  NcclComm& c = *s.flat;
  if (equal) {
    c.run("ncclAllGather", [&] {
      return api().allGather(in.input, out, bytes[0], ncclUint8, c.get(), call.stream);
    });
  } else {
    // Uneven parts: one broadcast per rank into its place, fused by the group.
    c.run("ncclGroupStart", [&] { return api().groupStart(); });
    size_t off = 0;
    for (int r = 0; r < comm.size(); ++r) {
      const void* send = r == comm.rank() ? in.input : at(out, off);
      c.run("ncclBroadcast", [&] {
        return api().broadcast(send, at(out, off), bytes[static_cast<size_t>(r)], ncclUint8, r,
                               c.get(), call.stream);
      });
      off += bytes[static_cast<size_t>(r)];
    }
    c.run("ncclGroupEnd (allgatherv)", [&] { return api().groupEnd(); });
  }
  return finish(call, describe("allgather", {in}), {s.flat});
}

std::shared_ptr<GpuWork> NcclBackend::broadcast(collectives::Communicator& comm, int device,
                                                const GpuTensor& t, size_t bytes, int root) {
  Call call = begin(comm, device, {&t});
  CommState& s = *call.state;
  if (s.staged) {
    HostStaged(*call.dc, options_.params.timeout_s, stagedChunk())
        .broadcast(comm, *call.slot, t.input, t.output, bytes, root);
    return finish(call, describe("broadcast", {t}), {});
  }
  s.flat->run("ncclBroadcast", [&] {
    return api().broadcast(t.input, t.output, bytes, ncclUint8, root, s.flat->get(), call.stream);
  });
  return finish(call, describe("broadcast", {t}), {s.flat});
}

std::shared_ptr<GpuWork> NcclBackend::alltoallv(collectives::Communicator& comm, int device,
                                                const GpuTensor& in,
                                                const std::vector<size_t>& send_bytes, void* out,
                                                const std::vector<size_t>& recv_bytes) {
  Call call = begin(comm, device, {&in});
  CommState& s = *call.state;
  if (s.staged) {
    HostStaged(*call.dc, options_.params.timeout_s, stagedChunk())
        .alltoallv(comm, *call.slot, in.input, send_bytes, out, recv_bytes);
    return finish(call, describe("alltoall", {in}), {});
  }
  NcclComm& c = *s.flat;
  c.run("ncclGroupStart", [&] { return api().groupStart(); });
  size_t soff = 0, roff = 0;
  for (int p = 0; p < comm.size(); ++p) {
    const size_t sb = send_bytes[static_cast<size_t>(p)], rb = recv_bytes[static_cast<size_t>(p)];
    if (sb > 0)
      c.run("ncclSend",
            [&] { return api().send(at(in.input, soff), sb, ncclUint8, p, c.get(), call.stream); });
    if (rb > 0)
      c.run("ncclRecv",
            [&] { return api().recv(at(out, roff), rb, ncclUint8, p, c.get(), call.stream); });
    soff += sb;
    roff += rb;
  }
  c.run("ncclGroupEnd (alltoallv)", [&] { return api().groupEnd(); });
  return finish(call, describe("alltoall", {in}), {s.flat});
}

std::shared_ptr<GpuWork> NcclBackend::reducescatterv(collectives::Communicator& comm, int device,
                                                     DataType dtype, const GpuTensor& in, void* out,
                                                     const std::vector<size_t>& counts, ReduceOp op,
                                                     double prescale, double postscale) {
  if (op == ReduceOp::kAverage) {
    op = ReduceOp::kSum;
    postscale /= comm.size();
  }
  prescale = kernels::gpuScaleFactor(dtype, prescale);
  postscale = kernels::gpuScaleFactor(dtype, postscale);
  Call call = begin(comm, device, {&in});
  CommState& s = *call.state;
  const size_t mine = counts[static_cast<size_t>(comm.rank())];
  if (s.staged) {
    HostStaged(*call.dc, options_.params.timeout_s, stagedChunk())
        .reducescatterv(comm, *call.slot, in.input, out, counts, dtype, op, prescale, postscale);
    return finish(call, describe("reducescatter", {in}), {});
  }
  const size_t es = dataTypeSize(dtype);
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  const void* src = in.input;
  void* scaled = nullptr;
  if (prescale != 1.0 && total > 0) {
    checkCuda(cudaMallocAsync(&scaled, total * es, call.stream), "cudaMallocAsync");
    CopyEntry e{in.input, scaled, total, 0};
    batchedCopy(&e, 1, dtype, dtype, prescale, nullptr, call.stream);
    src = scaled;
  }
  NcclComm& c = *s.flat;
  const bool equal =
      std::all_of(counts.begin(), counts.end(), [&](size_t n) { return n == counts[0]; });
  if (equal) {
    c.run("ncclReduceScatter", [&] {
      return api().reduceScatter(src, out, counts[0], ncclType(dtype), ncclOp(op, dtype), c.get(),
                                 call.stream);
    });
  } else {
    // Uneven blocks: one reduce per rank to that rank, fused by the group.
    c.run("ncclGroupStart", [&] { return api().groupStart(); });
    size_t off = 0;
    for (int r = 0; r < comm.size(); ++r) {
      c.run("ncclReduce", [&] {
        return api().reduce(at(src, off * es), out, counts[static_cast<size_t>(r)], ncclType(dtype),
                            ncclOp(op, dtype), r, c.get(), call.stream);
      });
      off += counts[static_cast<size_t>(r)];
    }
    c.run("ncclGroupEnd (reducescatterv)", [&] { return api().groupEnd(); });
  }
  if (scaled != nullptr) checkCuda(cudaFreeAsync(scaled, call.stream), "cudaFreeAsync");
  if (postscale != 1.0 && mine > 0) {
    CopyEntry e{out, out, mine, 0};
    batchedCopy(&e, 1, dtype, dtype, postscale, nullptr, call.stream);
  }
  return finish(call, describe("reducescatter", {in}), {s.flat});
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

}  // namespace

std::unique_ptr<backends::GpuBackend> createNcclBackend(
    const backends::GpuBackendOptions& options) {
  return std::make_unique<NcclBackend>(options);
}

}  // namespace perseus::nccl
