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
#include "collectives/collectives.h"
#include "engine/executor.h"
#include "engine/timeline.h"

namespace perseus::engine {
namespace {

class GpuExecutor final : public Executor {
 public:
  explicit GpuExecutor(backends::GpuBackend* backend) : backend_(backend) {}

  void run(const FusionGroup& g, const std::vector<Response>& rs, const std::vector<Entry*>& es,
           collectives::Communicator& comm, FusionBuffer&, Timeline* timeline) override {
    for (const FusionItem& it : g.items) {
      if (es[it.response] == nullptr) {
        // A joined rank would have to contribute device zeros; not supported on the GPU path.
        throw UnsupportedError(PERSEUS_STR(opTypeName(g.op)
                                           << " '" << rs[it.response].name
                                           << "': CUDA collectives cannot run while this rank "
                                              "has joined; finish GPU collectives before join()"));
      }
    }
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
      if (e != last) e->gpu_works.push_back(work);  // a grouped entry's items are adjacent
      last = e;
    }
  }

  void allreduce(const FusionGroup& g, const std::vector<Response>& rs,
                 const std::vector<Entry*>& es, collectives::Communicator& comm) {
    const Response& r0 = rs[g.items[0].response];
    const Reduction red = reductionOf(r0, comm.size());
    backends::GpuBatch batch;
    batch.device = es[g.items[0].response]->device;
    batch.dtype = r0.tensors[g.items[0].tensor].dtype;
    for (const FusionItem& it : g.items) {
      batch.tensors.push_back(
          tensorOf(*es[it.response], it.tensor, rs[it.response].tensors[it.tensor]));
    }
    attach(g, es, backend_->allreduce(comm, batch, red.op, red.prescale, red.postscale));
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
};

}  // namespace

std::unique_ptr<Executor> makeGpuExecutor(backends::GpuBackend* backend) {
  return std::make_unique<GpuExecutor>(backend);
}

}  // namespace perseus::engine
