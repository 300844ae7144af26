// The seam between the engine and the GPU data plane. Device-neutral: no CUDA or NCCL type
// appears here, so the engine compiles the same with and without CUDA; createGpuBackend()
// returns nullptr in a build without CUDA (the engine then rejects CUDA tensors with
// UnsupportedError).
//
// Flow of one CUDA collective (Note [GPU stream ordering]):
//  1. Framework thread, at submission: recordReady(device, producer_stream) records an event on
//     the stream that produced the tensor. The engine keeps it with the request.
//  2. Engine thread, after negotiation: allreduce()/... make Perseus's own high-priority stream
//     wait on those events (cudaStreamWaitEvent: no host or device-wide sync), enqueue the
//     fusion copy-in, the NCCL calls and the copy-out there, record a completion event, and
//     return a GpuWork at once.
//  3. Engine thread: completes the handle when GpuWork::poll() says done (or throws).
//     Framework thread: perseus_handle_cuda_stream_wait -> GpuWork::streamWait(stream) makes the
//     framework's next stream wait for the completion event, again without a host block.
//
// Errors: calls throw the exceptions of common/status.h. A CUDA tensor on a machine with no
// driver or device gives UnsupportedError at the first call that needs the device, never at
// load time. Lost ranks and NCCL failures become PeerLostError / TimeoutError / InternalError,
// and the communicators involved are aborted (ncclCommAbort), so nothing is left hanging.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "collectives/communicator.h"
#include "common/dtype.h"
#include "common/params.h"

namespace perseus::backends {

// "The producer's writes to this tensor are done" (a CUDA event recorded on its stream).
class GpuEvent {
 public:
  virtual ~GpuEvent() = default;
};

// One tensor of a collective. input may equal output (in place).
struct GpuTensor {
  // For error messages and the NaN report: the engine's name, borrowed for the backend call.
  std::string_view name;
  const void* input = nullptr;      // device pointer
  void* output = nullptr;           // device pointer (ignored where the call takes an explicit out)
  size_t count = 0;                 // elements
  std::shared_ptr<GpuEvent> ready;  // null: already ready (no wait)
};

// Tensors of one device and one dtype that the engine negotiated as one response.
struct GpuBatch {
  int device = 0;
  DataType dtype = DataType::kFloat32;
  std::vector<GpuTensor> tensors;
};

// The outcome of one enqueued collective. Thread contract: poll()/wait() by the thread that runs
// the engine's cycle (the engine thread, or a caller: Note [Caller-run cycles] in
// engine/engine.h); streamWait() and done-queries from any thread.
class GpuWork {
 public:
  virtual ~GpuWork() = default;
  // True once the GPU finished. While not done it checks NCCL's asynchronous errors and the
  // deadline (PERSEUS_TIMEOUT from enqueue); a failure aborts the communicators and throws.
  virtual bool poll() = 0;
  // poll() until done (spins, then sleeps); throws as poll() does.
  virtual void wait() = 0;
  // Makes `stream` (a cudaStream_t of the work's device; null = legacy default) wait for the
  // work on the GPU. Valid before the work is done.
  virtual void streamWait(void* stream) = 0;
  // With PERSEUS_ALLREDUCE_NANCHECK=1: after done, the name of the first tensor of the batch
  // (in batch order) whose input held a NaN or Inf, or "" if none.
  virtual std::string nonFiniteTensor() = 0;
  // The stream the work's completion was recorded on, and the record's place in the order
  // the stream saw it: a stream runs in order, so once a work on it is done, every work with an
  // earlier place on it is done too (Note [GPU completion by stream], gpu_completion.cc).
  // False where no one stream orders the work.
  virtual bool completionStream(const void** stream, uint64_t* order) const = 0;
};

struct GpuBackendOptions {
  Params params;
  int rank = 0;  // this process's global rank (for messages)
  // Host name of every global rank (index = global rank). Decides hierarchical allreduce and
  // detects ranks that share a GPU. Empty: every rank on one host.
  std::vector<std::string> hostnames;
};

// Thread contract: collectives and abort() by the thread that runs the engine's cycle, one at a
// time (the engine thread, or a caller: Note [Caller-run cycles] in engine/engine.h);
// recordReady(), allocate(), currentDevice() and restoreDevice() from any thread.
class GpuBackend {
 public:
  virtual ~GpuBackend() = default;

  // The calling thread's current CUDA device (-1 if CUDA cannot say), and making it current
  // again: the collectives make their device current without setting it back, so a framework
  // thread that runs the engine's cycles keeps its device this way. Only once the process used
  // a device: the first call of a thread that never touched CUDA would initialise the runtime.
  virtual int currentDevice() = 0;
  virtual void restoreDevice(int device) = 0;

  // "nccl" or "host-staged" (the data plane the last collective on `comm` used), for logs/tests.
  virtual std::string dataPlane(collectives::Communicator& comm, int device) = 0;

  virtual std::shared_ptr<GpuEvent> recordReady(int device, void* stream) = 0;
  // Device memory for library-owned outputs (allgather, alltoall, reducescatter); given back
  // when the last reference goes (the NCCL backend caches it: Note [Output block cache]).
  virtual std::shared_ptr<void> allocate(int device, size_t bytes) = 0;
  // Device memory of at least `bytes`, all zero once this returns: what a joined rank
  // contributes to a CUDA collective (Note [Join on the GPU], gpu_executor.cc). Engine thread.
  virtual std::shared_ptr<void> zeros(int device, size_t bytes) = 0;
  // The CUDA ordinal of a process that never named one: local_rank modulo the visible GPUs,
  // the one-process-per-GPU placement. Throws UnsupportedError where no GPU can be used.
  virtual int defaultDevice(int local_rank) = 0;

  // out[i] = op over the set of in[i] for every tensor of the batch, with prescale before and
  // postscale after the reduction (1.0: none). op is never Average (the engine turns it into
  // Sum + postscale). Float32 goes over the wire as float16 when PERSEUS_ALLREDUCE_DTYPE says so.
  virtual std::shared_ptr<GpuWork> allreduce(collectives::Communicator& comm, const GpuBatch& batch,
                                             ReduceOp op, double prescale, double postscale) = 0;
  // Concatenates every rank's bytes[r] bytes (in rank order) into `out` (sum of bytes).
  virtual std::shared_ptr<GpuWork> allgatherv(collectives::Communicator& comm, int device,
                                              const GpuTensor& in, void* out,
                                              const std::vector<size_t>& bytes) = 0;
  // The root's `in` reaches every rank's `t.output` (`bytes` bytes).
  virtual std::shared_ptr<GpuWork> broadcast(collectives::Communicator& comm, int device,
                                             const GpuTensor& t, size_t bytes, int root) = 0;
  virtual std::shared_ptr<GpuWork> alltoallv(collectives::Communicator& comm, int device,
                                             const GpuTensor& in,
                                             const std::vector<size_t>& send_bytes, void* out,
                                             const std::vector<size_t>& recv_bytes) = 0;
  // Reduces `in` (sum of counts elements) and leaves block r (counts[r] elements) in rank r's
  // `out`, with prescale/postscale as allreduce.
  virtual std::shared_ptr<GpuWork> reducescatterv(collectives::Communicator& comm, int device,
                                                  DataType dtype, const GpuTensor& in, void* out,
                                                  const std::vector<size_t>& counts, ReduceOp op,
                                                  double prescale, double postscale) = 0;

  // Fails every pending work with a copy of `reason` (a PeerLostError, TimeoutError or
  // ShutDownError from the CPU side) and aborts every NCCL communicator; later collectives on
  // a communicator create fresh ones. Engine thread.
  virtual void abort(const std::exception_ptr& reason) = 0;

  // A clean shutdown: when no work is pending, destroys every communicator (quietly, as
  // ncclCommDestroy does); work still pending is failed with `reason` and its communicators
  // aborted, as abort() does. Engine thread.
  virtual void close(const std::exception_ptr& reason) = 0;
};

// nullptr when this build has no CUDA. Touches no driver: safe on machines without a GPU.
std::unique_ptr<GpuBackend> createGpuBackend(const GpuBackendOptions& options);

// True in a build with CUDA + NCCL support ("cuda=1" in perseus_build_info).
bool gpuBuildEnabled();

// What the GPU side finds at run time: the CUDA runtime and driver, the GPUs, and which
// libnccl loaded (nccl_api.h's report, last: its error text runs to the end). "cuda=0" in a
// build without CUDA. Loads NCCL and touches the driver.
std::string gpuRuntimeReport();

// NCCL_VERSION_CODE of the nccl.h this build saw (e.g. 22809), 0 without CUDA.
int ncclHeaderVersion();

}  // namespace perseus::backends
