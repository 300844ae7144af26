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
#include "engine/exec/gpu_join.h"
#include "engine/exec/gpu_tensors.h"
#include "engine/timeline.h"

namespace perseus::engine {
namespace {

class GpuExecutor final : public Executor {
 public:
  GpuExecutor(backends::GpuBackend* backend, std::function<int()> joined_device)
      : backend_(backend), joined_(backend, std::move(joined_device)) {}

  void run(const FusionGroup& g, const std::vector<Response>& rs, const std::vector<Entry*>& es,
           collectives::Communicator& comm, FusionBuffer&, Timeline* timeline) override {
    joined_.clear();
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
    joined_.finish();  // Note [Join on the GPU]
    // Enqueueing on the device; the GPU's part is the COMMUNICATE span that completion records.
    if (timeline) {
      const auto end = Timeline::Clock::now();
      for (const FusionItem& it : g.items)
        timeline->span(rs[it.response].name, "LAUNCH", start, end);
    }
  }

 private:
  int deviceOf(const Entry* e) const { return e != nullptr ? e->device : joined_.device(); }

  // Attaches `work` to the entries of `g` that this rank has; when some item is a joined
  // rank's scratch, run() also waits for it.
  void attachOrWait(const FusionGroup& g, const std::vector<Entry*>& es,
                    const std::shared_ptr<backends::GpuWork>& work) {
    attachWork(g, es, work);
    for (const FusionItem& it : g.items) {
      if (es[it.response] == nullptr) {
        joined_.await(work);
        return;
      }
    }
  }

  // The group's tensors; a joined rank's zeros are one block for the group, one slice per
  // tensor, each aligned as an allocation would be.
  backends::GpuBatch allreduceBatch(const FusionGroup& g, const std::vector<Response>& rs,
                                    const std::vector<Entry*>& es) {
    const Response& r0 = rs[g.items[0].response];
    backends::GpuBatch batch;
    batch.device = deviceOf(es[g.items[0].response]);
    batch.dtype = r0.tensors[g.items[0].tensor].dtype;
    constexpr size_t kAlign = 256;
    auto aligned = [](size_t n) { return (n + kAlign - 1) / kAlign * kAlign; };
    size_t zero_bytes = 0;
    for (const FusionItem& it : g.items) {
      if (es[it.response] == nullptr)
        zero_bytes += aligned(rs[it.response].tensors[it.tensor].bytes());
    }
    char* zeros = zero_bytes > 0 ? joined_.zeros(zero_bytes) : nullptr;
    for (const FusionItem& it : g.items) {
      const TensorMeta& m = rs[it.response].tensors[it.tensor];
      const Entry* e = es[it.response];
      if (e != nullptr) {
        batch.tensors.push_back(entryTensor(*e, it.tensor, m));
      } else {
        batch.tensors.push_back(
            scratchTensor(rs[it.response].name, zeros, static_cast<size_t>(m.numElements())));
        zeros += aligned(m.bytes());
      }
    }
    return batch;
  }

  void allreduce(const FusionGroup& g, const std::vector<Response>& rs,
                 const std::vector<Entry*>& es, collectives::Communicator& comm) {
    const Reduction red = reductionOf(rs[g.items[0].response], comm.size());
    const backends::GpuBatch batch = allreduceBatch(g, rs, es);
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
        backends::GpuTensor none = joined_.tensor(r.name, 0, 0);
        void* out = joined_.tensor(r.name, total_bytes, 0).output;
        joined_.await(backend_->allgatherv(comm, joined_.device(), none, out, bytes));
        continue;
      }
      // Own input metadata: the response holds the reference rank's shape.
      const TensorMeta& mine = e->request.tensors[it.tensor];
      std::vector<int64_t> shape = m.shape;
      shape[0] = total;
      void* out = allocateOutput(*backend_, e, it.tensor, r.tensors.size(), m.dtype, shape);
      auto work =
          backend_->allgatherv(comm, e->device, entryTensor(*e, it.tensor, mine), out, bytes);
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
        backends::GpuTensor scratch = joined_.tensor(rs[it.response].name, m.bytes(), 0);
        joined_.await(backend_->broadcast(comm, joined_.device(), scratch, m.bytes(), root));
        continue;
      }
      e->gpu_works.push_back(
          backend_->broadcast(comm, e->device, entryTensor(*e, it.tensor, m), m.bytes(), root));
    }
  }

  void alltoall(const FusionGroup& g, const std::vector<Response>& rs,
                const std::vector<Entry*>& es, collectives::Communicator& comm) {
    const FusionItem& it = g.items[0];
    Entry* e = es[it.response];
    const TensorMeta& m = e->request.tensors[it.tensor];
    AlltoallPlan plan = planAlltoall(comm, *e, it.tensor);
    void* out = allocateOutput(*backend_, e, it.tensor, rs[it.response].tensors.size(), m.dtype,
                               plan.out_shape);
    e->gpu_works.push_back(backend_->alltoallv(comm, e->device, entryTensor(*e, it.tensor, m),
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
      void* out = allocateOutput(*backend_, e, it.tensor, r.tensors.size(), m.dtype, shape);
      e->gpu_works.push_back(backend_->reducescatterv(comm, e->device, m.dtype,
                                                      entryTensor(*e, it.tensor, m), out, counts,
                                                      red.op, red.prescale, red.postscale));
    }
  }

  backends::GpuBackend* const backend_;
  JoinedStandIns joined_;  // Note [Join on the GPU]
};

}  // namespace

std::unique_ptr<Executor> makeGpuExecutor(backends::GpuBackend* backend,
                                          std::function<int()> joined_device) {
  return std::make_unique<GpuExecutor>(backend, std::move(joined_device));
}

}  // namespace perseus::engine
