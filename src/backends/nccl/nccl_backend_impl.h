// The CUDA backend's class (nccl_backend.h makes it), shared by the files that implement it:
//   nccl_backend.cc      lifecycle: devices, communicators, the call's setup and completion
//   nccl_allreduce.cc    allreduce: single tensor, fused rounds, hierarchical, world size one
//   adasum_staged.cc     Adasum over several ranks, through the host
//   nccl_collectives.cc  allgather, broadcast, alltoall, reducescatter
#pragma once

#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "backends/gpu_backend.h"
#include "backends/nccl/comm_state.h"
#include "backends/nccl/device_context.h"
#include "backends/nccl/gpu_scaling.h"
#include "backends/nccl/gpu_work.h"
#include "backends/nccl/nccl_api.h"
#include "fusion/buffer_rounds.h"

namespace perseus::nccl {

using backends::GpuBatch;
using backends::GpuTensor;
using backends::GpuWork;

inline const char* at(const void* p, size_t bytes) { return static_cast<const char*>(p) + bytes; }
inline char* at(void* p, size_t bytes) { return static_cast<char*>(p) + bytes; }

// "allreduce of tensor 'x'", "allreduce of 5 tensors ('a', 'b', 'c', ...)": a work's name in
// its errors.
std::string describe(const char* op, const std::vector<GpuTensor>& tensors);

class NcclBackend : public backends::GpuBackend {
 public:
  explicit NcclBackend(const backends::GpuBackendOptions& options) : options_(options) {}
  ~NcclBackend() override;

  std::string dataPlane(collectives::Communicator& comm, int device) override;
  std::shared_ptr<backends::GpuEvent> recordReady(int device, void* stream) override;
  std::shared_ptr<void> allocate(int device, size_t bytes) override;
  std::shared_ptr<void> zeros(int device, size_t bytes) override;
  int defaultDevice(int local_rank) override;
  int currentDevice() override;
  void restoreDevice(int device) override;

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
  // How one allreduce runs, once its scaling is known (prepareAllreduce).
  struct AllreducePlan {
    ReduceOp op;
    double prescale, postscale;
    DataType wire;      // float16 for float32 tensors when PERSEUS_ALLREDUCE_DTYPE=0
    bool mixed;         // PERSEUS_ALLREDUCE_DTYPE=2: float16 across hosts only
    bool hierarchical;  // Note [Hierarchical allreduce]
    int* nan_flag;      // the device flag of PERSEUS_ALLREDUCE_NANCHECK, or null
  };
  // The allreduce's steps, in order.
  AllreducePlan prepareAllreduce(const Call& call, const GpuBatch& batch, size_t total,
                                 GpuScaling scaling);
  // One tensor, no wire cast, no hierarchy: no fusion copies.
  void singleTensorAllreduce(const Call& call, collectives::Communicator& comm, const GpuTensor& t,
                             DataType dtype, const AllreducePlan& plan);
  // The tensors through the fusion buffer, in as many rounds as it takes.
  void fusedAllreduce(const Call& call, collectives::Communicator& comm, const GpuBatch& batch,
                      const AllreducePlan& plan);
  std::shared_ptr<GpuWork> finishAllreduce(const Call& call, const GpuBatch& batch,
                                           const AllreducePlan& plan);
  void fusedRound(const Call& call, collectives::Communicator& comm, const GpuBatch& batch,
                  const fusion::FusionRound& round, const AllreducePlan& plan);
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

}  // namespace perseus::nccl
