// The engine's entry points, one per collective (any thread): each checks what only it can
// check, describes the call (call.h) and hands it to submit(), the one submission path
// (engine.cc). Collective calls without a user name (barrier, process-set changes) are named by
// counting them: ranks make them in the same order.
#include <algorithm>
#include <numeric>

#include "common/logging.h"
#include "engine/engine.h"

namespace perseus::engine {
namespace {

// The fields every collective call has.
Call callOf(OpType op, std::string_view name, int32_t set, Span<TensorView> in, bool blocking) {
  Call c;
  c.op = op;
  c.name = name;
  c.set = set;
  c.inputs = in;
  c.blocking = blocking;
  return c;
}

// A reduction's (allreduce, reducescatter).
Call reductionCall(OpType op, std::string_view name, int32_t set, Span<TensorView> in,
                   ReduceOp reduce_op, double prescale, double postscale, bool blocking) {
  Call c = callOf(op, name, set, in, blocking);
  c.reduce_op = reduce_op;
  c.prescale = prescale;
  c.postscale = postscale;
  return c;
}

// The caller's buffers of an allgather or reduce-scatter into them (Note [Allgather into]): none,
// or one non-null buffer per CPU input.
void checkCallerOutputs(const char* op, std::string_view name, Span<TensorView> in,
                        Span<void*> out) {
  if (out.empty()) return;
  bool ok = out.size() == in.size();
  for (size_t i = 0; ok && i < out.size(); ++i) ok = out[i] != nullptr && in[i].device < 0;
  if (!ok) {
    throw InvalidArgumentError(PERSEUS_STR(op << " '" << name << "': into buffers takes CPU "
                                              << "tensors and one non-null output per input"));
  }
}

}  // namespace

std::shared_ptr<Handle> Engine::allreduce(std::string_view name, Span<TensorView> in,
                                          Span<void*> out, ReduceOp op, double prescale,
                                          double postscale, int32_t set, bool blocking) {
  if (in.empty() || in.size() != out.size()) {
    throw InvalidArgumentError(
        PERSEUS_STR("allreduce '" << name << "': " << in.size() << " inputs and " << out.size()
                                  << " outputs; give one output per input (>= 1)"));
  }
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == nullptr) {
      throw InvalidArgumentError(PERSEUS_STR("allreduce '"
                                             << name << "': output " << i
                                             << " is null; pass a buffer (it may be the input)"));
    }
  }
  for (size_t i = 0; op == ReduceOp::kAdasum && i < in.size(); ++i) {
    if (!isFloatingPoint(in[i].dtype)) {
      throw UnsupportedError(PERSEUS_STR("allreduce '" << name << "': Adasum takes float16, "
                                                       << "bfloat16, float32 or float64 tensors, "
                                                       << "not " << dataTypeName(in[i].dtype)
                                                       << "; use op=Sum or Average"));
    }
  }
  Call c = reductionCall(OpType::kAllreduce, name, set, in, op, prescale, postscale, blocking);
  c.outputs = out;
  return submit(c);
}

std::shared_ptr<Handle> Engine::allgather(std::string_view name, Span<TensorView> in, int32_t set,
                                          bool blocking, Span<void*> out) {
  if (in.empty()) throw InvalidArgumentError(PERSEUS_STR("allgather '" << name << "': no tensors"));
  checkCallerOutputs("allgather", name, in, out);
  Call c = callOf(OpType::kAllgather, name, set, in, blocking);
  c.outputs = out;
  return submit(c);
}

bool Engine::openAllreduce(std::string_view name, const TensorView& in, ReduceOp op,
                           double prescale, double postscale, OpenedPost* opened) {
  Call c = reductionCall(OpType::kAllreduce, name, kGlobalSet, Span<TensorView>(&in, 1), op,
                         prescale, postscale, true);
  c.opened = opened;
  return open(c);
}

bool Engine::openAllgather(std::string_view name, const TensorView& in, std::vector<int64_t>* shape,
                           OpenedPost* opened) {
  Call c = callOf(OpType::kAllgather, name, kGlobalSet, Span<TensorView>(&in, 1), true);
  c.gather_shape = shape;
  c.opened = opened;
  return open(c);
}

std::shared_ptr<Handle> Engine::broadcast(std::string_view name, const TensorView& in, void* out,
                                          int32_t root, int32_t set, bool blocking) {
  if (out == nullptr) {
    throw InvalidArgumentError(PERSEUS_STR(
        "broadcast '" << name << "': null output; pass a buffer (it may be the input)"));
  }
  Call c = callOf(OpType::kBroadcast, name, set, Span<TensorView>(&in, 1), blocking);
  c.outputs = Span<void*>(&out, 1);
  c.root = root;
  return submit(c);
}

std::shared_ptr<Handle> Engine::alltoall(std::string_view name, const TensorView& in,
                                         Span<int64_t> splits, int32_t set, bool blocking) {
  Call c = callOf(OpType::kAlltoall, name, set, Span<TensorView>(&in, 1), blocking);
  c.splits = splits;
  return submit(c);
}

std::shared_ptr<Handle> Engine::reducescatter(std::string_view name, Span<TensorView> in,
                                              ReduceOp op, double prescale, double postscale,
                                              int32_t set, bool blocking, Span<void*> out) {
  if (in.empty()) {
    throw InvalidArgumentError(PERSEUS_STR("reducescatter '" << name << "': no tensors"));
  }
  if (op == ReduceOp::kAdasum) {
    throw UnsupportedError(PERSEUS_STR("reducescatter '" << name
                                                         << "': op=Adasum is an allreduce op, as "
                                                            "in Horovod; use op=Sum or Average"));
  }
  checkCallerOutputs("reducescatter", name, in, out);
  Call c = reductionCall(OpType::kReducescatter, name, set, in, op, prescale, postscale, blocking);
  c.outputs = out;
  return submit(c);
}

std::shared_ptr<Handle> Engine::barrier(int32_t set) {
  const std::string name = "__barrier." + std::to_string(directory_.nextBarrier(set));
  return submit(callOf(OpType::kBarrier, name, set, {}, false));
}

std::shared_ptr<Handle> Engine::join(int device) {
  if (device >= 0) {
    const int used = gpu_device_.load();
    if (used >= 0 && used != device) {
      throw InvalidArgumentError(PERSEUS_STR(
          "join(device=" << device << "): this process's CUDA tensors are on device " << used
                         << "; a joined rank contributes its zeros on the same GPU (pass device="
                         << used << " or leave it out)"));
    }
    join_device_.store(device);
  }
  // The negotiated path runs allreduces with joined ranks' zeros (Note [Posted collectives]).
  fast_path_->revokeAll();
  return submit(callOf(OpType::kJoin, "__join", kGlobalSet, {}, false));
}

std::shared_ptr<Handle> Engine::addProcessSet(const std::vector<int>& ranks) {
  std::vector<int32_t> sorted(ranks.begin(), ranks.end());
  std::sort(sorted.begin(), sorted.end());
  if (sorted.empty() || std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end() ||
      sorted.front() < 0 || sorted.back() >= transport_->size()) {
    throw InvalidArgumentError(PERSEUS_STR("add_process_set(" << rankVector(ranks)
                                                              << "): give distinct ranks in [0, "
                                                              << transport_->size() << ")"));
  }
  const std::string name = "__add_process_set." + std::to_string(directory_.nextAddSet());
  Call c = callOf(OpType::kAddProcessSet, name, kGlobalSet, {}, false);
  c.set_ranks = sorted;
  return submit(c);
}

std::shared_ptr<Handle> Engine::removeProcessSet(int32_t id) {
  if (id < 1 || !processSet(id)) {
    throw InvalidArgumentError(PERSEUS_STR("remove_process_set("
                                           << id
                                           << "): no such set; only sets made by "
                                              "add_process_set (ids >= 1) can be removed"));
  }
  const std::string name = "__remove_process_set." + std::to_string(directory_.nextRemoveSet());
  Call c = callOf(OpType::kRemoveProcessSet, name, kGlobalSet, {}, false);
  c.set_id = id;
  return submit(c);
}

}  // namespace perseus::engine
