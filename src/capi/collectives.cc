// The collective entry points of the C API: validate the C arguments, convert them, submit.
// Non-contiguous tensors are the framework layer's job; here a tensor is dense by contract.
#include <algorithm>
#include <optional>

#include "capi/runtime.h"

using namespace perseus;
using perseus::capi::guarded;

namespace {

using engine::OpType;
using engine::TensorArg;

std::string checkName(const char* name, const char* call) {
  if (name == nullptr || *name == '\0') {
    throw InvalidArgumentError(
        std::string(call) +
        ": the name is NULL or empty; give every collective a name that is the same on every rank");
  }
  return name;
}

TensorArg toArg(const perseus_tensor* t, const std::string& name, const char* what) {
  if (t == nullptr)
    throw InvalidArgumentError(PERSEUS_STR("'" << name << "': " << what << " is NULL"));
  if (!isValidDataType(t->dtype)) {
    throw InvalidArgumentError(PERSEUS_STR("'" << name << "': " << what << " has dtype " << t->dtype
                                               << ", which is not a perseus_dtype"));
  }
  if (t->ndim < 0 || t->ndim > PERSEUS_MAX_NDIM) {
    throw InvalidArgumentError(PERSEUS_STR("'" << name << "': " << what << " has ndim " << t->ndim
                                               << "; allowed 0.." << PERSEUS_MAX_NDIM));
  }
  if (t->ndim > 0 && t->shape == nullptr) {
    throw InvalidArgumentError(PERSEUS_STR("'" << name << "': " << what << " has ndim " << t->ndim
                                               << " but a NULL shape"));
  }
  TensorArg a;
  a.data = t->data;
  a.dtype = static_cast<DataType>(t->dtype);
  a.shape.assign(t->shape, t->shape + t->ndim);
  a.device = t->device < 0 ? PERSEUS_DEVICE_CPU : t->device;
  a.cuda_stream = a.device >= 0 ? t->cuda_stream : nullptr;
  return a;
}

void* toOutput(const perseus_tensor* out, const TensorArg& in, const std::string& name) {
  TensorArg o = toArg(out, name, "output");
  if (o.dtype != in.dtype || o.shape != in.shape) {
    throw InvalidArgumentError(
        PERSEUS_STR("'" << name << "': the output (" << dataTypeName(o.dtype) << " "
                        << engine::shapeString(o.shape) << ") must match the input ("
                        << dataTypeName(in.dtype) << " " << engine::shapeString(in.shape) << ")"));
  }
  if (o.device != in.device) {
    throw InvalidArgumentError(
        PERSEUS_STR("'" << name << "': input and output are on different devices"));
  }
  return out->data;
}

ReduceOp toOp(int32_t op, const std::string& name) {
  if (!isValidReduceOp(op)) {
    throw InvalidArgumentError(
        PERSEUS_STR("'" << name << "': reduce op " << op << " is not a perseus_reduce_op"));
  }
  return static_cast<ReduceOp>(op);
}

void checkCount(int32_t count, const void* p, const std::string& name) {
  if (count < 1 || p == nullptr) {
    throw InvalidArgumentError(PERSEUS_STR("'" << name << "': grouped call with count " << count
                                               << " and " << (p ? "" : "NULL ")
                                               << "tensors; give >= 1 tensor"));
  }
}

// The posted path (Note [Posted collectives]) for one CPU tensor of the global set, read in
// place: the arguments, or nothing when the call does not qualify (the general path then
// validates and submits it, reporting any bad argument). `out` null: the library's output
// (allgather, reducescatter).
std::optional<engine::PostArgs> postable(OpType kind, const char* name, const perseus_tensor* in,
                                         const perseus_tensor* out) {
  if (name == nullptr || *name == '\0' || in == nullptr || !isValidDataType(in->dtype) ||
      in->device >= 0 || in->ndim < 0 || in->ndim > PERSEUS_MAX_NDIM ||
      (in->ndim > 0 && in->shape == nullptr)) {
    return std::nullopt;
  }
  if ((kind == OpType::kAllreduce || kind == OpType::kBroadcast) &&
      (out == nullptr || out->data == nullptr || out->device >= 0 || out->dtype != in->dtype ||
       out->ndim != in->ndim || (in->ndim > 0 && out->shape == nullptr) ||
       !std::equal(in->shape, in->shape + in->ndim, out->shape))) {
    return std::nullopt;
  }
  engine::PostArgs a;
  a.kind = kind;
  a.name = name;
  a.dtype = static_cast<DataType>(in->dtype);
  a.shape = in->shape;
  a.ndim = static_cast<size_t>(in->ndim);
  a.input = in->data;
  a.output = out != nullptr ? out->data : nullptr;
  return a;
}

// With a reduction's op and scales (allreduce, reducescatter); nothing stays nothing.
std::optional<engine::PostArgs> reducing(std::optional<engine::PostArgs> a, int32_t op,
                                         double prescale, double postscale) {
  if (!a || !isValidReduceOp(op)) return std::nullopt;
  a->reduce_op = static_cast<ReduceOp>(op);
  a->prescale = prescale;
  a->postscale = postscale;
  return a;
}

// Submits `a` on the post lane: true when it was posted and `*handle` published.
bool posted(const std::optional<engine::PostArgs>& a, perseus_handle* handle) {
  if (!a || handle == nullptr) return false;
  auto h = capi::requireEngine()->post(*a);
  if (!h) return false;
  *handle = capi::publish(h);
  return true;
}

void checkHandle(perseus_handle* handle) {
  if (handle == nullptr) throw InvalidArgumentError("the handle pointer is NULL");
}

// A blocking call's wait, on the calling thread as perseus_wait(handle, -1) does, for a
// handle that never enters the table: throws the operation's error.
void finish(engine::Engine& e, engine::Handle& h) {
  e.waitFor(h, -1, capi::runtime().spin_us.load(std::memory_order_relaxed));
  if (h.status() != StatusCode::kOk) throw Error(h.status(), h.message());
}

// The blocking calls' post lane: true when `a` was posted and has completed. The rank whose
// post completes the generation finishes it with no handle; one that waits has an untimed
// handle (nobody can ask for its times) that never enters the table (docs/algorithms.md,
// "Blocking calls").
bool postedAndFinished(std::optional<engine::PostArgs> a) {
  if (!a) return false;
  a->blocking = true;
  a->spin_us = capi::runtime().spin_us.load(std::memory_order_relaxed);
  auto e = capi::requireEngine();
  bool finished = false;
  auto h = e->post(*a, &finished);
  if (finished) return true;
  if (!h) return false;
  finish(*e, *h);
  return true;
}

// The general path of an allreduce (validated, converted, submitted).
std::shared_ptr<engine::Handle> submitAllreduce(const char* name, int32_t count,
                                                const perseus_tensor* inputs,
                                                const perseus_tensor* outputs, int32_t op,
                                                double prescale, double postscale,
                                                int32_t process_set, const char* call) {
  std::string n = checkName(name, call);
  checkCount(count, inputs, n);
  if (outputs == nullptr)
    throw InvalidArgumentError("'" + n + "': outputs are NULL (pass the inputs for in place)");
  auto e = capi::requireEngine();
  std::vector<TensorArg> in;
  std::vector<void*> out;
  for (int32_t i = 0; i < count; ++i) {
    in.push_back(toArg(&inputs[i], n, "input"));
    out.push_back(toOutput(&outputs[i], in.back(), n));
  }
  return e->allreduce(n, in, out, toOp(op, n), prescale, postscale, process_set);
}

// The general path of a broadcast.
std::shared_ptr<engine::Handle> submitBroadcast(const char* name, const perseus_tensor* input,
                                                const perseus_tensor* output, int32_t root_rank,
                                                int32_t process_set, const char* call) {
  std::string n = checkName(name, call);
  auto e = capi::requireEngine();
  TensorArg in = toArg(input, n, "input");
  void* out = toOutput(output, in, n);
  return e->broadcast(n, in, out, root_rank, process_set);
}

// A broadcast's post-lane arguments, if it qualifies.
std::optional<engine::PostArgs> postableBroadcast(const char* name, const perseus_tensor* input,
                                                  const perseus_tensor* output, int32_t root_rank,
                                                  int32_t process_set) {
  if (process_set != 0) return std::nullopt;
  auto a = postable(OpType::kBroadcast, name, input, output);
  if (a) a->root = root_rank;
  return a;
}

}  // namespace

extern "C" {

perseus_status perseus_allreduce(const char* name, const perseus_tensor* input,
                                 const perseus_tensor* output, int32_t op, double prescale,
                                 double postscale, int32_t process_set, perseus_handle* handle) {
  return perseus_grouped_allreduce(name, 1, input, output, op, prescale, postscale, process_set,
                                   handle);
}

perseus_status perseus_grouped_allreduce(const char* name, int32_t count,
                                         const perseus_tensor* inputs,
                                         const perseus_tensor* outputs, int32_t op, double prescale,
                                         double postscale, int32_t process_set,
                                         perseus_handle* handle) {
  return guarded([&] {
    if (count == 1 && process_set == 0 &&
        posted(
            reducing(postable(OpType::kAllreduce, name, inputs, outputs), op, prescale, postscale),
            handle)) {
      return;
    }
    checkHandle(handle);
    *handle = capi::publish(submitAllreduce(name, count, inputs, outputs, op, prescale, postscale,
                                            process_set, "perseus_allreduce"));
  });
}

perseus_status perseus_allreduce_blocking(const char* name, const perseus_tensor* input,
                                          const perseus_tensor* output, int32_t op, double prescale,
                                          double postscale, int32_t process_set) {
  return guarded([&] {
    if (process_set == 0 &&
        postedAndFinished(
            reducing(postable(OpType::kAllreduce, name, input, output), op, prescale, postscale))) {
      return;
    }
    auto h = submitAllreduce(name, 1, input, output, op, prescale, postscale, process_set,
                             "perseus_allreduce_blocking");
    finish(*capi::requireEngine(), *h);
  });
}

perseus_status perseus_allgather(const char* name, const perseus_tensor* input, int32_t process_set,
                                 perseus_handle* handle) {
  return perseus_grouped_allgather(name, 1, input, process_set, handle);
}

perseus_status perseus_grouped_allgather(const char* name, int32_t count,
                                         const perseus_tensor* inputs, int32_t process_set,
                                         perseus_handle* handle) {
  return guarded([&] {
    if (count == 1 && process_set == 0 &&
        posted(postable(OpType::kAllgather, name, inputs, nullptr), handle)) {
      return;
    }
    std::string n = checkName(name, "perseus_allgather");
    checkHandle(handle);
    checkCount(count, inputs, n);
    auto e = capi::requireEngine();
    std::vector<TensorArg> in;
    for (int32_t i = 0; i < count; ++i) in.push_back(toArg(&inputs[i], n, "input"));
    *handle = capi::publish(e->allgather(n, in, process_set));
  });
}

perseus_status perseus_broadcast(const char* name, const perseus_tensor* input,
                                 const perseus_tensor* output, int32_t root_rank,
                                 int32_t process_set, perseus_handle* handle) {
  return guarded([&] {
    if (posted(postableBroadcast(name, input, output, root_rank, process_set), handle)) return;
    checkHandle(handle);
    *handle = capi::publish(
        submitBroadcast(name, input, output, root_rank, process_set, "perseus_broadcast"));
  });
}

perseus_status perseus_broadcast_blocking(const char* name, const perseus_tensor* input,
                                          const perseus_tensor* output, int32_t root_rank,
                                          int32_t process_set) {
  return guarded([&] {
    if (postedAndFinished(postableBroadcast(name, input, output, root_rank, process_set))) return;
    auto h =
        submitBroadcast(name, input, output, root_rank, process_set, "perseus_broadcast_blocking");
    finish(*capi::requireEngine(), *h);
  });
}

perseus_status perseus_alltoall(const char* name, const perseus_tensor* input,
                                const int64_t* splits, int32_t num_splits, int32_t process_set,
                                perseus_handle* handle) {
  return guarded([&] {
    std::string n = checkName(name, "perseus_alltoall");
    checkHandle(handle);
    if (num_splits < 0 || (num_splits > 0 && splits == nullptr)) {
      throw InvalidArgumentError(PERSEUS_STR("'" << n << "': num_splits " << num_splits << " with "
                                                 << (splits ? "" : "NULL ") << "splits"));
    }
    auto e = capi::requireEngine();
    TensorArg in = toArg(input, n, "input");
    std::vector<int64_t> s;
    if (num_splits > 0) s.assign(splits, splits + num_splits);
    *handle = capi::publish(e->alltoall(n, in, s, process_set));
  });
}

perseus_status perseus_reducescatter(const char* name, const perseus_tensor* input, int32_t op,
                                     double prescale, double postscale, int32_t process_set,
                                     perseus_handle* handle) {
  return perseus_grouped_reducescatter(name, 1, input, op, prescale, postscale, process_set,
                                       handle);
}

perseus_status perseus_grouped_reducescatter(const char* name, int32_t count,
                                             const perseus_tensor* inputs, int32_t op,
                                             double prescale, double postscale, int32_t process_set,
                                             perseus_handle* handle) {
  return guarded([&] {
    if (count == 1 && process_set == 0 &&
        posted(reducing(postable(OpType::kReducescatter, name, inputs, nullptr), op, prescale,
                        postscale),
               handle)) {
      return;
    }
    std::string n = checkName(name, "perseus_reducescatter");
    checkHandle(handle);
    checkCount(count, inputs, n);
    auto e = capi::requireEngine();
    std::vector<TensorArg> in;
    for (int32_t i = 0; i < count; ++i) in.push_back(toArg(&inputs[i], n, "input"));
    *handle = capi::publish(e->reducescatter(n, in, toOp(op, n), prescale, postscale, process_set));
  });
}

perseus_status perseus_barrier(int32_t process_set, perseus_handle* handle) {
  return guarded([&] {
    checkHandle(handle);
    *handle = capi::publish(capi::requireEngine()->barrier(process_set));
  });
}

perseus_status perseus_join(perseus_handle* handle) { return perseus_join_device(handle, -1); }

perseus_status perseus_join_device(perseus_handle* handle, int32_t device) {
  return guarded([&] {
    checkHandle(handle);
    *handle = capi::publish(capi::requireEngine()->join(device));
  });
}

}  // extern "C"
