// Note [GPU completion]
// A negotiated group of CUDA tensors is enqueued on the GpuBackend, which returns a GpuWork at
// once (the GPU runs it later, ordered after the producers' ready events). The executor
// appends the work to each entry; once an entry's last group ran, the engine publishes the
// works in the handle (so perseus_handle_cuda_stream_wait can chain a framework stream) and
// keeps the handle in its GPU-pending list, which the engine thread polls every loop turn.
// Polling rather than waiting keeps the engine thread free to negotiate and enqueue the next
// cycle (and other sets) while the GPU works: the NCCL calls of consecutive cycles pipeline
// on the backend's stream. The handle completes when every work of the entry is done.
//
// Library-owned outputs (allgather, alltoall, reducescatter) are device memory from
// GpuBackend::allocate(), owned by the handle's OwnedTensor. One process drives one CUDA
// device (Engine::submit enforces it), so every rank's groups are the same.
//
// Note [Join on the GPU]
// A joined rank has no entry for the collectives that the others still run, but every rank of
// an NCCL communicator must make each call, so it takes part with device memory of its own on
// the device join() named (Engine::joinedDevice): zeros for allreduce, reduced in place and
// dropped; no rows for allgather, whose result it receives into scratch; scratch for a
// broadcast (negotiation refuses a joined root, and alltoall and reducescatter while a rank has
// joined). It then waits for that work before returning: the scratch must outlive the GPU's use
// of it, and a joined rank has no handle to hold it. The others enqueue the same calls in the
// same order without waiting for this rank, so the wait ends.
#include "collectives/collectives.h"
#include "engine/exec/executor.h"
#include "engine/timeline.h"

namespace perseus::engine {
namespace {

class GpuExecutor final : public Executor {
 public:
  GpuExecutor(backends::GpuBackend* backend, std::function<int()> joined_device)
      : backend_(backend), joined_device_(std::move(joined_device)) {}

  void run(const FusionGroup& g, const std::vector<Response>& rs, const std::vector<Entry*>& es,
           collectives::Communicator& comm, FusionBuffer&, Timeline* timeline) override {
    joined_scratch_.clear();
    joined_works_.clear();
    const auto start = timeline ? Timeline::Clock::now() : Timeline::Clock::time_point{};
    switch (g.op) {
      case OpType::kAllreduce:
        allreduce(g, rs, es, comm);
        break;
      case OpType::kAllgather:
        allgather(g, rs, es, comm);
        break;
      case OpType::kBroadcast:
        broadcast(g, rs, es, comm);
        break;
      case OpType::kAlltoall:
        alltoall(g, rs, es, comm);
        break;
      case OpType::kReducescatter:
        reducescatter(g, rs, es, comm);
        break;
      default:
        PERSEUS_CHECK(false, "GPU executor got " << opTypeName(g.op));
    }
    for (const auto& work : joined_works_) work->wait();  // Note [Join on the GPU]
    joined_works_.clear();
    joined_scratch_.clear();
    // Enqueueing on the device; the GPU's part is the COMMUNICATE span that completion records.
    if (timeline) {
      const auto end = Timeline::Clock::now();
      for (const FusionItem& it : g.items)
        timeline->span(rs[it.response].name, "LAUNCH", start, end);
    }
  }

 private:
  static backends::GpuTensor tensorOf(const Entry& e, size_t t, const TensorMeta& m) {
    backends::GpuTensor gt;
    gt.name = e.request.name;
    gt.input = e.inputs[t];
    gt.output = e.outputs[t];
    gt.count = static_cast<size_t>(m.numElements());
    gt.ready = e.ready;
    return gt;
  }

  // A joined rank's stand-in for an entry's tensor: `bytes` of zeros on its device.
  backends::GpuTensor joinedTensor(const std::string& name, size_t bytes, size_t count) {
    joined_scratch_.push_back(backend_->zeros(joined_device_(), bytes));
    return scratchTensor(name, joined_scratch_.back().get(), count);
  }

  static backends::GpuTensor scratchTensor(const std::string& name, void* p, size_t count) {
    backends::GpuTensor gt;
    gt.name = name;
    gt.input = gt.output = p;
    gt.count = count;
    return gt;
  }

  int deviceOf(const Entry* e) { return e != nullptr ? e->device : joined_device_(); }

  // Attaches `work` to the entries of `g` that this rank has; when some item is a joined
  // rank's scratch, run() also waits for it.
  void attachOrWait(const FusionGroup& g, const std::vector<Entry*>& es,
                    const std::shared_ptr<backends::GpuWork>& work) {
    attach(g, es, work);
    for (const FusionItem& it : g.items) {
      if (es[it.response] == nullptr) {
        joined_works_.push_back(work);
        return;
      }
    }
  }

  static OwnedTensor& ownedOutput(Entry* e, size_t t, size_t count) {
    auto& outs = e->handle->outputs();
    if (outs.size() < count) outs.resize(count);
    return outs[t];
  }

  // Device memory for one library-owned output of `shape`.
  void* allocateOutput(Entry* e, size_t t, size_t count, DataType dt, std::vector<int64_t> shape) {
    OwnedTensor& out = ownedOutput(e, t, count);
    out.dtype = dt;
    out.shape = std::move(shape);
    int64_t n = 1;
    for (int64_t d : out.shape) n *= d;
    out.bytes = static_cast<size_t>(n) * dataTypeSize(dt);
    out.device = e->device;
    out.device_data = backend_->allocate(e->device, out.bytes > 0 ? out.bytes : 1);
    return out.device_data.get();
  }

  static void attach(const FusionGroup& g, const std::vector<Entry*>& es,
                     const std::shared_ptr<backends::GpuWork>& work) {
    Entry* last = nullptr;
    for (const FusionItem& it : g.items) {
      Entry* e = es[it.response];
      if (e != nullptr && e != last) e->gpu_works.push_back(work);  // grouped items are adjacent
      last = e;
    }
  }

  void allreduce(const FusionGroup& g, const std::vector<Response>& rs,
                 const std::vector<Entry*>& es, collectives::Communicator& comm) {
    const Response& r0 = rs[g.items[0].response];
    const Reduction red = reductionOf(r0, comm.size());
    backends::GpuBatch batch;
    batch.device = deviceOf(es[g.items[0].response]);
    batch.dtype = r0.tensors[g.items[0].tensor].dtype;
    // A joined rank's zeros: one block for the group, one slice per tensor, each aligned as
    // an allocation would be.
    constexpr size_t kAlign = 256;
    auto aligned = [](size_t n) { return (n + kAlign - 1) / kAlign * kAlign; };
    size_t zero_bytes = 0;
    for (const FusionItem& it : g.items) {
      if (es[it.response] == nullptr)
        zero_bytes += aligned(rs[it.response].tensors[it.tensor].bytes());
    }
    char* zeros = nullptr;
    if (zero_bytes > 0) {
      joined_scratch_.push_back(backend_->zeros(joined_device_(), zero_bytes));
      zeros = static_cast<char*>(joined_scratch_.back().get());
    }
    for (const FusionItem& it : g.items) {
      const TensorMeta& m = rs[it.response].tensors[it.tensor];
      const Entry* e = es[it.response];
      if (e != nullptr) {
        batch.tensors.push_back(tensorOf(*e, it.tensor, m));
      } else {
        batch.tensors.push_back(
            scratchTensor(rs[it.response].name, zeros, static_cast<size_t>(m.numElements())));
        zeros += aligned(m.bytes());
      }
    }
    attachOrWait(g, es, backend_->allreduce(comm, batch, red.op, red.prescale, red.postscale));
  }

  void allgather(const FusionGroup& g, const std::vector<Response>& rs,
                 const std::vector<Entry*>& es, collectives::Communicator& comm) {
    const int n = comm.size();
    for (const FusionItem& it : g.items) {
      const Response& r = rs[it.response];
      const TensorMeta& m = r.tensors[it.tensor];
      Entry* e = es[it.response];
      const size_t row_bytes = static_cast<size_t>(m.rowElements()) * dataTypeSize(m.dtype);
      std::vector<size_t> bytes(n);
      int64_t total = 0;
      for (int k = 0; k < n; ++k) {
        const int64_t rows = r.first_dims[it.tensor * n + k];
        bytes[k] = static_cast<size_t>(rows) * row_bytes;
        total += rows;
      }
      const size_t total_bytes = static_cast<size_t>(total) * row_bytes;
      if (e == nullptr) {  // joined: no rows to send, everyone's received into scratch
        backends::GpuTensor none = joinedTensor(r.name, 0, 0);
        void* out = joinedTensor(r.name, total_bytes, 0).output;
        joined_works_.push_back(backend_->allgatherv(comm, joined_device_(), none, out, bytes));
        continue;
      }
      // Own input metadata: the response holds the reference rank's shape.
      const TensorMeta& mine = e->request.tensors[it.tensor];
      std::vector<int64_t> shape = m.shape;
      shape[0] = total;
      void* out = allocateOutput(e, it.tensor, r.tensors.size(), m.dtype, shape);
      auto work = backend_->allgatherv(comm, e->device, tensorOf(*e, it.tensor, mine), out, bytes);
      e->gpu_works.push_back(work);
    }
  }

  void broadcast(const FusionGroup& g, const std::vector<Response>& rs,
                 const std::vector<Entry*>& es, collectives::Communicator& comm) {
    const int root = rs[g.items[0].response].root;
    for (const FusionItem& it : g.items) {
      const TensorMeta& m = rs[it.response].tensors[it.tensor];
      Entry* e = es[it.response];
      if (e == nullptr) {  // joined, never the root: receives into scratch
        backends::GpuTensor scratch = joinedTensor(rs[it.response].name, m.bytes(), 0);
        joined_works_.push_back(
            backend_->broadcast(comm, joined_device_(), scratch, m.bytes(), root));
        continue;
      }
      e->gpu_works.push_back(
          backend_->broadcast(comm, e->device, tensorOf(*e, it.tensor, m), m.bytes(), root));
    }
  }

  void alltoall(const FusionGroup& g, const std::vector<Response>& rs,
                const std::vector<Entry*>& es, collectives::Communicator& comm) {
    const FusionItem& it = g.items[0];
    Entry* e = es[it.response];
    const TensorMeta& m = e->request.tensors[it.tensor];
    AlltoallPlan plan = planAlltoall(comm, *e, it.tensor);
    void* out =
        allocateOutput(e, it.tensor, rs[it.response].tensors.size(), m.dtype, plan.out_shape);
    e->gpu_works.push_back(backend_->alltoallv(comm, e->device, tensorOf(*e, it.tensor, m),
                                               plan.send_bytes, out, plan.recv_bytes));
    e->handle->receivedSplits() = std::move(plan.recv_rows);
  }

  void reducescatter(const FusionGroup& g, const std::vector<Response>& rs,
                     const std::vector<Entry*>& es, collectives::Communicator& comm) {
    const int n = comm.size();
    const int me = comm.rank();
    const Reduction red = reductionOf(rs[g.items[0].response], n);
    for (const FusionItem& it : g.items) {
      const Response& r = rs[it.response];
      const TensorMeta& m = r.tensors[it.tensor];
      Entry* e = es[it.response];
      std::vector<size_t> counts(n);
      for (int k = 0; k < n; ++k) {
        counts[k] = static_cast<size_t>(blockRows(m.shape[0], n, k) * m.rowElements());
      }
      std::vector<int64_t> shape = m.shape;
      shape[0] = blockRows(m.shape[0], n, me);
      void* out = allocateOutput(e, it.tensor, r.tensors.size(), m.dtype, shape);
      e->gpu_works.push_back(backend_->reducescatterv(comm, e->device, m.dtype,
                                                      tensorOf(*e, it.tensor, m), out, counts,
                                                      red.op, red.prescale, red.postscale));
    }
  }

  backends::GpuBackend* const backend_;
  const std::function<int()> joined_device_;
  // Note [Join on the GPU]: this group's scratch and the works that use it.
  std::vector<std::shared_ptr<void>> joined_scratch_;
  std::vector<std::shared_ptr<backends::GpuWork>> joined_works_;
};

}  // namespace

std::unique_ptr<Executor> makeGpuExecutor(backends::GpuBackend* backend,
                                          std::function<int()> joined_device) {
  return std::make_unique<GpuExecutor>(backend, std::move(joined_device));
}

}  // namespace perseus::engine
