// The engine's entry points, one per collective (any thread): each turns its arguments into a
// request (an Entry) and submits it (engine.cc), or first offers a CPU tensor of the global set
// to the post path (Note [Posted collectives]). Collective calls without a user name (barrier,
// process-set changes) are named by counting them: ranks make them in the same order.
#include <algorithm>
#include <numeric>

#include "common/logging.h"
#include "engine/engine.h"

namespace perseus::engine {
namespace {

// One process drives one device per call: a grouped call's tensors share it.
void addTensor(Entry& e, const TensorArg& t) {
  if (!e.inputs.empty() && t.device != e.device) {
    throw InvalidArgumentError(PERSEUS_STR(
        opTypeName(e.request.op) << " '" << e.request.name << "': tensors on devices " << e.device
                                 << " and " << t.device << " in one call; submit them separately"));
  }
  e.request.tensors.push_back({t.dtype, t.shape});
  e.inputs.push_back(t.data);
  e.device = t.device;
  e.cuda_stream = t.cuda_stream;
  e.request.device_kind = t.device >= 0 ? DeviceKind::kCuda : DeviceKind::kCpu;
}

// A single CPU tensor of the global set may be posted (Note [Posted collectives]): its
// arguments, or nothing for any other call.
std::optional<PostArgs> postable(OpType kind, const std::string& name, const TensorArg& in,
                                 int32_t set) {
  if (set != Engine::kGlobalSet || in.device >= 0) return std::nullopt;
  PostArgs a;
  a.kind = kind;
  a.name = name;
  a.dtype = in.dtype;
  a.shape = in.shape.data();
  a.ndim = in.shape.size();
  a.input = in.data;
  return a;
}

}  // namespace

std::shared_ptr<Handle> Engine::allreduce(const std::string& name, const std::vector<TensorArg>& in,
                                          const std::vector<void*>& out, ReduceOp op,
                                          double prescale, double postscale, int32_t set) {
  if (in.empty() || in.size() != out.size()) {
    throw InvalidArgumentError(
        PERSEUS_STR("allreduce '" << name << "': " << in.size() << " inputs and " << out.size()
                                  << " outputs; give one output per input (>= 1)"));
  }
  if (in.size() == 1 && out[0] != nullptr) {
    if (auto a = postable(OpType::kAllreduce, name, in[0], set)) {
      a->output = out[0];
      a->reduce_op = op;
      a->prescale = prescale;
      a->postscale = postscale;
      if (auto h = post(*a)) return h;
    }
  }
  auto e = std::make_unique<Entry>();
  e->request.op = OpType::kAllreduce;
  e->request.reduce_op = op;
  e->request.prescale = prescale;
  e->request.postscale = postscale;
  for (size_t i = 0; i < in.size(); ++i) {
    if (out[i] == nullptr) {
      throw InvalidArgumentError(PERSEUS_STR("allreduce '"
                                             << name << "': output " << i
                                             << " is null; pass a buffer (it may be the input)"));
    }
    e->outputs.push_back(out[i]);
  }
  e->request.name = name;
  e->request.process_set = set;
  for (const TensorArg& t : in) addTensor(*e, t);
  return submit(std::move(e));
}

namespace {
std::unique_ptr<Entry> makeEntry(OpType op, const std::string& name, int32_t set,
                                 const std::vector<TensorArg>& in) {
  auto e = std::make_unique<Entry>();
  e->request.op = op;
  e->request.name = name;
  e->request.process_set = set;
  for (const TensorArg& t : in) {
    addTensor(*e, t);
    e->outputs.push_back(nullptr);
  }
  return e;
}
}  // namespace

std::shared_ptr<Handle> Engine::allgather(const std::string& name, const std::vector<TensorArg>& in,
                                          int32_t set) {
  if (in.empty()) throw InvalidArgumentError("allgather '" + name + "': no tensors");
  if (in.size() == 1) {
    if (auto a = postable(OpType::kAllgather, name, in[0], set)) {
      if (auto h = post(*a)) return h;
    }
  }
  return submit(makeEntry(OpType::kAllgather, name, set, in));
}

std::shared_ptr<Handle> Engine::broadcast(const std::string& name, const TensorArg& in, void* out,
                                          int32_t root, int32_t set) {
  if (out == nullptr) {
    throw InvalidArgumentError("broadcast '" + name +
                               "': null output; pass a buffer (it may be the input)");
  }
  if (auto a = postable(OpType::kBroadcast, name, in, set)) {
    a->output = out;
    a->root = root;
    if (auto h = post(*a)) return h;
  }
  auto e = makeEntry(OpType::kBroadcast, name, set, {in});
  e->outputs[0] = out;
  e->request.root = root;
  return submit(std::move(e));
}

std::shared_ptr<Handle> Engine::alltoall(const std::string& name, const TensorArg& in,
                                         const std::vector<int64_t>& splits, int32_t set) {
  auto e = makeEntry(OpType::kAlltoall, name, set, {in});
  e->splits = splits;
  e->request.num_splits = static_cast<int32_t>(splits.size());
  return submit(std::move(e));
}

std::shared_ptr<Handle> Engine::reducescatter(const std::string& name,
                                              const std::vector<TensorArg>& in, ReduceOp op,
                                              double prescale, double postscale, int32_t set) {
  if (in.empty()) throw InvalidArgumentError("reducescatter '" + name + "': no tensors");
  if (in.size() == 1) {
    if (auto a = postable(OpType::kReducescatter, name, in[0], set)) {
      a->reduce_op = op;
      a->prescale = prescale;
      a->postscale = postscale;
      if (auto h = post(*a)) return h;
    }
  }
  auto e = makeEntry(OpType::kReducescatter, name, set, in);
  e->request.reduce_op = op;
  e->request.prescale = prescale;
  e->request.postscale = postscale;
  return submit(std::move(e));
}

std::shared_ptr<Handle> Engine::barrier(int32_t set) {
  int n;
  {
    std::lock_guard<std::mutex> lock(mu_);
    n = barrier_calls_[set]++;
  }
  return submit(makeEntry(OpType::kBarrier, "__barrier." + std::to_string(n), set, {}));
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
  posted_.revokeAll();
  return submit(makeEntry(OpType::kJoin, "__join", kGlobalSet, {}));
}

std::shared_ptr<Handle> Engine::addProcessSet(const std::vector<int>& ranks) {
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  if (sorted.empty() || std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end() ||
      sorted.front() < 0 || sorted.back() >= transport_->size()) {
    throw InvalidArgumentError(PERSEUS_STR("add_process_set(" << rankVector(ranks)
                                                              << "): give distinct ranks in [0, "
                                                              << transport_->size() << ")"));
  }
  int n;
  {
    std::lock_guard<std::mutex> lock(mu_);
    n = add_set_calls_++;
  }
  auto e =
      makeEntry(OpType::kAddProcessSet, "__add_process_set." + std::to_string(n), kGlobalSet, {});
  e->request.set_ranks.assign(sorted.begin(), sorted.end());
  return submit(std::move(e));
}

std::shared_ptr<Handle> Engine::removeProcessSet(int32_t id) {
  if (id < 1 || !processSet(id)) {
    throw InvalidArgumentError(PERSEUS_STR("remove_process_set("
                                           << id
                                           << "): no such set; only sets made by "
                                              "add_process_set (ids >= 1) can be removed"));
  }
  int n;
  {
    std::lock_guard<std::mutex> lock(mu_);
    n = remove_set_calls_++;
  }
  auto e = makeEntry(OpType::kRemoveProcessSet, "__remove_process_set." + std::to_string(n),
                     kGlobalSet, {});
  e->request.set_id = id;
  return submit(std::move(e));
}

}  // namespace perseus::engine
