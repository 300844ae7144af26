// The collective entry points of the C API: validate the C arguments, describe them as tensor
// views and call the engine's entry for the collective, which decides the rest (the post path
// or negotiation, Note [Posted collectives]). The blocking forms are the same entries with the
// blocking flag. Non-contiguous tensors are the framework layer's job; here a tensor is dense
// by contract.
#include <algorithm>
#include <string_view>
#include <vector>

#include "capi/runtime.h"

using namespace perseus;
using perseus::capi::guarded;

namespace {

using engine::Span;
using engine::TensorView;

std::string_view checkName(const char* name, const char* call) {
  if (name == nullptr || *name == '\0') {
    throw InvalidArgumentError(
        std::string(call) +
        ": the name is NULL or empty; give every collective a name that is the same on every rank");
  }
  return name;
}

// The C tensor as the engine's view of it, read in place (nothing is copied or allocated).
TensorView toView(const perseus_tensor* t, std::string_view name, const char* what) {
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
  TensorView v;
  v.data = t->data;
  v.dtype = static_cast<DataType>(t->dtype);
  v.shape = t->shape;
  v.ndim = static_cast<size_t>(t->ndim);
  v.device = t->device < 0 ? PERSEUS_DEVICE_CPU : t->device;
  v.cuda_stream = v.device >= 0 ? t->cuda_stream : nullptr;
  return v;
}

std::vector<int64_t> shapeOf(const TensorView& v) {
  return std::vector<int64_t>(v.shape, v.shape + v.ndim);
}

void* toOutput(const perseus_tensor* out, const TensorView& in, std::string_view name) {
  const TensorView o = toView(out, name, "output");
  if (o.dtype != in.dtype || o.ndim != in.ndim ||
      !std::equal(in.shape, in.shape + in.ndim, o.shape)) {
    throw InvalidArgumentError(PERSEUS_STR(
        "'" << name << "': the output (" << dataTypeName(o.dtype) << " "
            << engine::shapeString(shapeOf(o)) << ") must match the input ("
            << dataTypeName(in.dtype) << " " << engine::shapeString(shapeOf(in)) << ")"));
  }
  if (o.device != in.device) {
    throw InvalidArgumentError(
        PERSEUS_STR("'" << name << "': input and output are on different devices"));
  }
  return out->data;
}

ReduceOp toOp(int32_t op, std::string_view name) {
  if (!isValidReduceOp(op)) {
    throw InvalidArgumentError(
        PERSEUS_STR("'" << name << "': reduce op " << op << " is not a perseus_reduce_op"));
  }
  return static_cast<ReduceOp>(op);
}

void checkCount(int32_t count, const void* p, std::string_view name) {
  if (count < 1 || p == nullptr) {
    throw InvalidArgumentError(PERSEUS_STR("'" << name << "': grouped call with count " << count
                                               << " and " << (p ? "" : "NULL ")
                                               << "tensors; give >= 1 tensor"));
  }
}

void checkHandle(perseus_handle* handle) {
  if (handle == nullptr) throw InvalidArgumentError("the handle pointer is NULL");
}

// A call's tensor views (and outputs): on the stack for the usual few, so that a single
// tensor's call allocates nothing on its way to the post path.
template <typename T>
class Views {
 public:
  explicit Views(int32_t count) : n_(static_cast<size_t>(count)) {
    if (n_ > kInline) heap_.resize(n_);
  }
  T& operator[](size_t i) { return n_ > kInline ? heap_[i] : inline_[i]; }
  Span<T> span() const { return Span<T>(n_ > kInline ? heap_.data() : inline_, n_); }

 private:
  static constexpr size_t kInline = 4;
  size_t n_;
  T inline_[kInline] = {};
  std::vector<T> heap_;
};

void checkOpened(perseus_opened* opened, std::string_view name) {
  if (opened == nullptr) {
    throw InvalidArgumentError(PERSEUS_STR("'" << name << "': the opened pointer is NULL"));
  }
  *opened = perseus_opened{};
}

// An opened call as the C caller keeps it; its name is the caller's string.
void toC(const engine::OpenedPost& o, perseus_opened* out) {
  out->open = 1;
  out->op_ = static_cast<int32_t>(o.op);
  out->name_ = o.name.data();
  out->slot_ = static_cast<int64_t>(o.slot);
  out->gen_ = o.gen;
  out->input_ = o.input;
}

// The allreduce entry behind perseus_allreduce, perseus_grouped_allreduce,
// perseus_allreduce_blocking and perseus_allreduce_on_stream: the engine's handle, or none
// for a blocking call.
// `n`: the name, checked.
std::shared_ptr<engine::Handle> allreduce(engine::Engine& e, std::string_view n, int32_t count,
                                          const perseus_tensor* inputs,
                                          const perseus_tensor* outputs, int32_t op,
                                          double prescale, double postscale, int32_t process_set,
                                          bool blocking) {
  checkCount(count, inputs, n);
  if (outputs == nullptr)
    throw InvalidArgumentError(
        PERSEUS_STR("'" << n << "': outputs are NULL (pass the inputs for in place)"));
  Views<TensorView> in(count);
  Views<void*> out(count);
  for (int32_t i = 0; i < count; ++i) {
    const auto k = static_cast<size_t>(i);
    in[k] = toView(&inputs[i], n, "input");
    out[k] = toOutput(&outputs[i], in[k], n);
  }
  return e.allreduce(n, in.span(), out.span(), toOp(op, n), prescale, postscale, process_set,
                     blocking);
}

// The broadcast entry behind perseus_broadcast and perseus_broadcast_blocking (no handle).
void broadcast(const char* name, const perseus_tensor* input, const perseus_tensor* output,
               int32_t root_rank, int32_t process_set, perseus_handle* handle, const char* call) {
  std::string_view n = checkName(name, call);
  const bool blocking = handle == nullptr;
  auto e = capi::requireEngine();
  const TensorView in = toView(input, n, "input");
  void* out = toOutput(output, in, n);
  auto h = e->broadcast(n, in, out, root_rank, process_set, blocking);
  if (!blocking) *handle = capi::publish(h);
}

// `big` must be `small` with its first dimension the process set's size times as long: the
// output of an allgather into a buffer, the input of a reduce-scatter into one.
void checkSetTimes(const TensorView& small, const TensorView& big, int32_t set,
                   std::string_view name, const char* what) {
  auto info = capi::requireEngine()->processSet(set);
  if (!info) throw InvalidArgumentError(PERSEUS_STR("process set " << set << " does not exist"));
  const auto size = static_cast<int64_t>(info->members.size());
  std::vector<int64_t> want = shapeOf(small);
  if (!want.empty()) want[0] *= size;
  if (big.dtype != small.dtype || want.empty() || shapeOf(big) != want) {
    throw InvalidArgumentError(
        PERSEUS_STR("'" << name << "': " << what << " needs " << dataTypeName(small.dtype) << " "
                        << engine::shapeString(shapeOf(small)) << " per rank and "
                        << engine::shapeString(want) << " for the set's " << size << " ranks, not "
                        << dataTypeName(big.dtype) << " " << engine::shapeString(shapeOf(big))));
  }
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
    std::string_view n = checkName(name, "perseus_allreduce");
    checkHandle(handle);
    auto e = capi::requireEngine();
    *handle = capi::publish(
        allreduce(*e, n, count, inputs, outputs, op, prescale, postscale, process_set, false));
  });
}

perseus_status perseus_allreduce_blocking(const char* name, const perseus_tensor* input,
                                          const perseus_tensor* output, int32_t op, double prescale,
                                          double postscale, int32_t process_set) {
  return guarded([&] {
    std::string_view n = checkName(name, "perseus_allreduce_blocking");
    auto e = capi::requireEngine();
    allreduce(*e, n, 1, input, output, op, prescale, postscale, process_set, true);
  });
}

perseus_status perseus_allreduce_on_stream(const char* name, const perseus_tensor* input,
                                           const perseus_tensor* output, int32_t op,
                                           double prescale, double postscale, int32_t process_set,
                                           void* stream) {
  return guarded([&] {
    std::string_view n = checkName(name, "perseus_allreduce_on_stream");
    auto e = capi::requireEngine();
    const bool cpu = input != nullptr && input->device == PERSEUS_DEVICE_CPU;
    auto h = allreduce(*e, n, 1, input, output, op, prescale, postscale, process_set, cpu);
    if (!cpu) capi::streamWait(e.get(), *h, stream);
  });
}

perseus_status perseus_allgather(const char* name, const perseus_tensor* input, int32_t process_set,
                                 perseus_handle* handle) {
  return perseus_grouped_allgather(name, 1, input, process_set, handle);
}

perseus_status perseus_allgather_into(const char* name, const perseus_tensor* input,
                                      const perseus_tensor* output, int32_t process_set,
                                      perseus_handle* handle) {
  return guarded([&] {
    std::string_view n = checkName(name, "perseus_allgather_into");
    checkHandle(handle);
    TensorView in = toView(input, n, "input");
    checkSetTimes(in, toView(output, n, "output"), process_set, n, "an allgather into a buffer");
    void* out = output->data;
    *handle = capi::publish(capi::requireEngine()->allgather(
        n, Span<TensorView>(&in, 1), process_set, false, Span<void*>(&out, 1)));
  });
}

perseus_status perseus_reducescatter_into(const char* name, const perseus_tensor* input,
                                          const perseus_tensor* output, int32_t op, double prescale,
                                          double postscale, int32_t process_set,
                                          perseus_handle* handle) {
  return guarded([&] {
    std::string_view n = checkName(name, "perseus_reducescatter_into");
    checkHandle(handle);
    TensorView in = toView(input, n, "input");
    checkSetTimes(toView(output, n, "output"), in, process_set, n,
                  "a reduce-scatter into a buffer");
    void* out = output->data;
    *handle = capi::publish(
        capi::requireEngine()->reducescatter(n, Span<TensorView>(&in, 1), toOp(op, n), prescale,
                                             postscale, process_set, false, Span<void*>(&out, 1)));
  });
}

perseus_status perseus_open_allreduce(const char* name, const perseus_tensor* input, int32_t op,
                                      double prescale, double postscale, perseus_opened* opened) {
  return guarded([&] {
    std::string_view n = checkName(name, "perseus_open_allreduce");
    checkOpened(opened, n);
    engine::OpenedPost o;
    const TensorView in = toView(input, n, "input");
    if (capi::requireEngine()->openAllreduce(n, in, toOp(op, n), prescale, postscale, &o)) {
      toC(o, opened);
    }
  });
}

perseus_status perseus_open_allgather(const char* name, const perseus_tensor* input,
                                      int64_t* result_shape, int32_t* result_ndim,
                                      perseus_opened* opened) {
  return guarded([&] {
    std::string_view n = checkName(name, "perseus_open_allgather");
    checkOpened(opened, n);
    if (result_shape == nullptr || result_ndim == nullptr) {
      throw InvalidArgumentError(
          PERSEUS_STR("'" << n << "': result_shape and result_ndim are required"));
    }
    engine::OpenedPost o;
    const TensorView in = toView(input, n, "input");
    thread_local std::vector<int64_t> shape;  // keeps its capacity: no allocation per call
    if (!capi::requireEngine()->openAllgather(n, in, &shape, &o)) return;
    std::copy(shape.begin(), shape.end(), result_shape);
    *result_ndim = static_cast<int32_t>(shape.size());
    toC(o, opened);
  });
}

perseus_status perseus_finish_opened(const perseus_opened* opened, void* output,
                                     perseus_handle* handle) {
  return guarded([&] {
    checkHandle(handle);
    if (opened == nullptr || opened->open != 1) {
      throw InvalidArgumentError("perseus_finish_opened: not an opened call");
    }
    engine::OpenedPost o;
    o.op = static_cast<engine::OpType>(opened->op_);
    o.name = opened->name_;
    o.slot = static_cast<size_t>(opened->slot_);
    o.gen = opened->gen_;
    o.input = opened->input_;
    auto h = capi::requireEngine()->finishOpened(o, output);
    *handle = h ? capi::publish(h) : 0;
  });
}

perseus_status perseus_grouped_allgather(const char* name, int32_t count,
                                         const perseus_tensor* inputs, int32_t process_set,
                                         perseus_handle* handle) {
  return guarded([&] {
    std::string_view n = checkName(name, "perseus_allgather");
    checkHandle(handle);
    checkCount(count, inputs, n);
    auto e = capi::requireEngine();
    Views<TensorView> in(count);
    for (int32_t i = 0; i < count; ++i) in[static_cast<size_t>(i)] = toView(&inputs[i], n, "input");
    *handle = capi::publish(e->allgather(n, in.span(), process_set));
  });
}

perseus_status perseus_broadcast(const char* name, const perseus_tensor* input,
                                 const perseus_tensor* output, int32_t root_rank,
                                 int32_t process_set, perseus_handle* handle) {
  return guarded([&] {
    checkHandle(handle);
    broadcast(name, input, output, root_rank, process_set, handle, "perseus_broadcast");
  });
}

perseus_status perseus_broadcast_blocking(const char* name, const perseus_tensor* input,
                                          const perseus_tensor* output, int32_t root_rank,
                                          int32_t process_set) {
  return guarded([&] {
    broadcast(name, input, output, root_rank, process_set, nullptr, "perseus_broadcast_blocking");
  });
}

perseus_status perseus_alltoall(const char* name, const perseus_tensor* input,
                                const int64_t* splits, int32_t num_splits, int32_t process_set,
                                perseus_handle* handle) {
  return guarded([&] {
    std::string_view n = checkName(name, "perseus_alltoall");
    checkHandle(handle);
    if (num_splits < 0 || (num_splits > 0 && splits == nullptr)) {
      throw InvalidArgumentError(PERSEUS_STR("'" << n << "': num_splits " << num_splits << " with "
                                                 << (splits ? "" : "NULL ") << "splits"));
    }
    auto e = capi::requireEngine();
    const TensorView in = toView(input, n, "input");
    const Span<int64_t> s(splits, num_splits > 0 ? static_cast<size_t>(num_splits) : 0);
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
    std::string_view n = checkName(name, "perseus_reducescatter");
    checkHandle(handle);
    checkCount(count, inputs, n);
    auto e = capi::requireEngine();
    Views<TensorView> in(count);
    for (int32_t i = 0; i < count; ++i) in[static_cast<size_t>(i)] = toView(&inputs[i], n, "input");
    *handle = capi::publish(
        e->reducescatter(n, in.span(), toOp(op, n), prescale, postscale, process_set));
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
