// Blocking in-place allreduce and broadcast, and a blocking CPU allgather, for the framework
// layers' fast path: the caller passes a dense, contiguous tensor as (address, dtype,
// shape[, CUDA device, stream]) and keeps it alive for the call, so no DLPack capsule,
// TensorArg or Python Handle is built. A CUDA call returns
// once the collective's GPU work is done (its handle completes only then, Note [GPU
// completion]), so later work on any stream is ordered after it without a stream wait. These are
// plain CPython FASTCALL functions: pybind11's overload dispatch, keyword matching and argument
// casters cost about as much as the engine's whole small allreduce (bench/small_ops/README.md has
// the split). Every check of the core still runs: names, dtypes and shapes are matched across ranks
// there.
#include "fast_calls.h"

#include <Python.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "errors.h"
#include "handle.h"
#include "perseus/c_api.h"
#include "tensor_arg.h"
#include "tensor_view.h"

namespace perseus_py {
namespace {

// A tensor described by its address, dtype code and shape tuple (torch.Size is a tuple).
bool parseTensor(PyObject* address, PyObject* dtype, PyObject* shape, FlatTensor& out) {
  if (!PyTuple_Check(shape)) {
    PyErr_SetString(PyExc_TypeError, "shape must be a tuple (torch.Size) of ints");
    return false;
  }
  const Py_ssize_t ndim = PyTuple_GET_SIZE(shape);
  if (ndim > PERSEUS_MAX_NDIM) {
    PyErr_Format(PyExc_ValueError, "%zd dimensions; at most %d are supported", ndim,
                 PERSEUS_MAX_NDIM);
    return false;
  }
  for (Py_ssize_t i = 0; i < ndim; ++i) {
    out.shape[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i));
    if (out.shape[i] == -1 && PyErr_Occurred()) return false;
  }
  void* data = PyLong_AsVoidPtr(address);
  if (data == nullptr && PyErr_Occurred()) return false;
  const long code = PyLong_AsLong(dtype);
  if (code == -1 && PyErr_Occurred()) return false;
  out.t.data = dataOrPlaceholder(data);
  out.t.dtype = static_cast<int32_t>(code);
  out.t.ndim = static_cast<int32_t>(ndim);
  out.t.shape = out.shape;
  out.t.device = PERSEUS_DEVICE_CPU;
  out.t.cuda_stream = nullptr;
  return true;
}

// The optional trailing (device, stream) of a CUDA tensor; absent: a CPU tensor.
bool parseDevice(PyObject* const* args, Py_ssize_t at, Py_ssize_t nargs, FlatTensor& out) {
  if (nargs == at) return true;
  const long device = PyLong_AsLong(args[at]);
  void* stream = PyLong_AsVoidPtr(args[at + 1]);
  if (PyErr_Occurred()) return false;
  out.t.device = static_cast<int32_t>(device);
  out.t.cuda_stream = device >= 0 ? stream : nullptr;
  return true;
}

// `expected` arguments, or two more (a CUDA tensor's device and stream).
bool argCount(const char* fn, Py_ssize_t nargs, Py_ssize_t expected) {
  if (nargs == expected || nargs == expected + 2) return true;
  PyErr_Format(PyExc_TypeError, "%s takes %zd or %zd positional arguments (%zd given)", fn,
               expected, expected + 2, nargs);
  return false;
}

// The call's result: None, or the Python exception of a failed status.
PyObject* finish(perseus_status status, const char* what) {
  if (status == PERSEUS_OK) Py_RETURN_NONE;
  setStatusError(status, statusMessage(status, what));
  return nullptr;
}

// The blocking allreduce of `t`, the GIL released around the engine call.
PyObject* allreduce(const char* name, FlatTensor& t, long op, double prescale, double postscale,
                    long process_set) {
  perseus_status status;
  Py_BEGIN_ALLOW_THREADS;
  status = perseus_allreduce_blocking(name, &t.t, &t.t, static_cast<int32_t>(op), prescale,
                                      postscale, static_cast<int32_t>(process_set));
  Py_END_ALLOW_THREADS;
  return finish(status, "perseus_allreduce_blocking");
}

PyObject* broadcast(const char* name, FlatTensor& t, long root, long process_set) {
  perseus_status status;
  Py_BEGIN_ALLOW_THREADS;
  status = perseus_broadcast_blocking(name, &t.t, &t.t, static_cast<int32_t>(root),
                                      static_cast<int32_t>(process_set));
  Py_END_ALLOW_THREADS;
  return finish(status, "perseus_broadcast_blocking");
}

// The arguments of allreduce_inplace and allreduce_on_stream: (name, address, dtype, shape, op,
// prescale, postscale, process_set[, device, stream]).
struct InplaceAllreduce {
  const char* name = nullptr;
  FlatTensor t;
  long op = 0;
  double prescale = 1.0;
  double postscale = 1.0;
  long process_set = 0;
};

bool parseInplaceAllreduce(PyObject* const* args, Py_ssize_t nargs, InplaceAllreduce& a) {
  a.name = PyUnicode_AsUTF8(args[0]);
  if (a.name == nullptr || !parseTensor(args[1], args[2], args[3], a.t)) return false;
  a.op = PyLong_AsLong(args[4]);
  a.prescale = PyFloat_AsDouble(args[5]);
  a.postscale = PyFloat_AsDouble(args[6]);
  a.process_set = PyLong_AsLong(args[7]);
  return !PyErr_Occurred() && parseDevice(args, 8, nargs, a.t);
}

// allreduce_inplace(name, address, dtype, shape, op, prescale, postscale, process_set
//                   [, device, stream])
PyObject* allreduceInplace(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  InplaceAllreduce a;
  if (!argCount("allreduce_inplace", nargs, 8) || !parseInplaceAllreduce(args, nargs, a))
    return nullptr;
  return allreduce(a.name, a.t, a.op, a.prescale, a.postscale, a.process_set);
}

// allreduce_on_stream(name, address, dtype, shape, op, prescale, postscale, process_set,
//                     device, stream): the in-place allreduce of a CUDA tensor, ordered on
// `stream` the way torch.distributed orders a blocking collective: it returns once the engine
// enqueued the GPU work and `stream` waits for it, with no host block for the GPU work itself
// (allreduce_inplace waits for that, as Horovod's synchronize() does). No handle reaches
// Python.
PyObject* allreduceOnStream(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 10) {
    PyErr_Format(PyExc_TypeError, "allreduce_on_stream takes 10 positional arguments (%zd given)",
                 nargs);
    return nullptr;
  }
  InplaceAllreduce a;
  if (!parseInplaceAllreduce(args, nargs, a)) return nullptr;
  perseus_handle id = 0;
  perseus_status status;
  const char* what = "perseus_allreduce";
  Py_BEGIN_ALLOW_THREADS;
  status = perseus_allreduce(a.name, &a.t.t, &a.t.t, static_cast<int32_t>(a.op), a.prescale,
                             a.postscale, static_cast<int32_t>(a.process_set), &id);
  if (status == PERSEUS_OK) {
    what = "perseus_handle_cuda_stream_wait";
    status = perseus_handle_cuda_stream_wait(id, a.t.t.cuda_stream);
    perseus_release(id);
  }
  Py_END_ALLOW_THREADS;
  return finish(status, what);
}

// broadcast_inplace(name, address, dtype, shape, root, process_set[, device, stream])
PyObject* broadcastInplace(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (!argCount("broadcast_inplace", nargs, 6)) return nullptr;
  const char* name = PyUnicode_AsUTF8(args[0]);
  if (name == nullptr) return nullptr;
  FlatTensor t;
  if (!parseTensor(args[1], args[2], args[3], t)) return nullptr;
  const long root = PyLong_AsLong(args[4]);
  const long process_set = PyLong_AsLong(args[5]);
  if (PyErr_Occurred() || !parseDevice(args, 6, nargs, t)) return nullptr;
  return broadcast(name, t, root, process_set);
}

// The tensor forms take the framework's tensor object itself (tensor_view.h) and return it, or
// NotImplemented, having done nothing, for a tensor they cannot view: the caller then takes its
// own path, which converts the tensor or reports what is wrong with it.
bool exactCount(const char* fn, Py_ssize_t nargs, Py_ssize_t expected) {
  if (nargs == expected) return true;
  PyErr_Format(PyExc_TypeError, "%s takes %zd positional arguments (%zd given)", fn, expected,
               nargs);
  return false;
}

// The (name, op, prescale, postscale, process_set) after the tensor of allreduce_tensor and
// allreduce_copy.
struct TensorReduce {
  const char* name = nullptr;
  long op = 0;
  double prescale = 1.0;
  double postscale = 1.0;
  long process_set = 0;
};

bool parseTensorReduce(PyObject* const* args, TensorReduce& a) {
  a.name = PyUnicode_AsUTF8(args[1]);
  if (a.name == nullptr) return false;
  a.op = PyLong_AsLong(args[2]);
  a.prescale = PyFloat_AsDouble(args[3]);
  a.postscale = PyFloat_AsDouble(args[4]);
  a.process_set = PyLong_AsLong(args[5]);
  return !PyErr_Occurred();
}

// The tensor itself after a successful call, else the call's exception.
PyObject* returnTensor(PyObject* result, PyObject* tensor) {
  if (result == nullptr) return nullptr;
  Py_DECREF(result);
  Py_INCREF(tensor);
  return tensor;
}

}  // namespace

// allreduce_tensor(tensor, name, op, prescale, postscale, process_set)
PyObject* allreduceTensor(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (!exactCount("allreduce_tensor", nargs, 6)) return nullptr;
  FlatTensor t;
  if (!viewDenseCpu(args[0], t)) Py_RETURN_NOTIMPLEMENTED;
  TensorReduce a;
  if (!parseTensorReduce(args, a)) return nullptr;
  return returnTensor(allreduce(a.name, t, a.op, a.prescale, a.postscale, a.process_set), args[0]);
}

// broadcast_tensor(tensor, name, root, process_set)
PyObject* broadcastTensor(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (!exactCount("broadcast_tensor", nargs, 4)) return nullptr;
  FlatTensor t;
  if (!viewDenseCpu(args[0], t)) Py_RETURN_NOTIMPLEMENTED;
  const char* name = PyUnicode_AsUTF8(args[1]);
  if (name == nullptr) return nullptr;
  const long root = PyLong_AsLong(args[2]);
  const long process_set = PyLong_AsLong(args[3]);
  if (PyErr_Occurred()) return nullptr;
  return returnTensor(broadcast(name, t, root, process_set), args[0]);
}

namespace {

// Releases a library handle on every way out.
struct ReleaseHandle {
  perseus_handle id;
  ~ReleaseHandle() { perseus_release(id); }
};

constexpr double kWaitSliceS = 0.25;

// Goes on waiting, as Handle.wait() does, for a handle that did not complete within a first
// slice: in slices, so that Ctrl-C interrupts a long wait, and noting the call site for the
// stall diagnosis (only late ops pay for it). Returns false with a Python exception set.
bool waitLate(perseus_handle id) {
  noteCallSite(id);
  for (;;) {
    if (PyErr_CheckSignals() != 0) return false;
    perseus_status s;
    Py_BEGIN_ALLOW_THREADS;
    s = perseus_wait(id, kWaitSliceS);
    Py_END_ALLOW_THREADS;
    if (s == PERSEUS_OK) return true;
    if (s != PERSEUS_ERR_IN_PROGRESS) {
      setStatusError(s, statusMessage(s, "perseus_wait"));
      return false;
    }
  }
}

// `src` (CPU) copied into a new framework tensor: made through its exchange API (newTensorLike)
// when `view` (like's viewDenseCpu()) is given and the API can, with no Python call; else by
// allocate(shape, like) -> (tensor, address) (`like`: what the caller's allocate reads the dtype
// from). For small results a copy costs less than handing the library's memory over through a
// DLPack capsule.
PyObject* newTensorFrom(const perseus_tensor& src, PyObject* allocate, PyObject* like,
                        const FlatTensor* view) {
  auto bytes = static_cast<size_t>(dtypeSize(src.dtype));
  for (int32_t i = 0; i < src.ndim; ++i) bytes *= static_cast<size_t>(src.shape[i]);
  if (view != nullptr) {
    void* dst = nullptr;
    PyObject* tensor = newTensorLike(like, *view, src.ndim, src.shape, &dst);
    if (tensor != nullptr) {
      if (bytes != 0) std::memcpy(dst, src.data, bytes);
      return tensor;
    }
    if (PyErr_Occurred()) return nullptr;
  }
  PyObject* shape = PyTuple_New(src.ndim);
  if (shape == nullptr) return nullptr;
  for (int32_t i = 0; i < src.ndim; ++i) {
    PyTuple_SET_ITEM(shape, i, PyLong_FromLongLong(src.shape[i]));
  }
  PyObject* made = PyObject_CallFunctionObjArgs(allocate, shape, like, nullptr);
  Py_DECREF(shape);
  if (made == nullptr) return nullptr;
  if (!PyTuple_Check(made) || PyTuple_GET_SIZE(made) != 2) {
    Py_DECREF(made);
    PyErr_SetString(PyExc_TypeError, "allocate must return (tensor, address)");
    return nullptr;
  }
  void* dst = PyLong_AsVoidPtr(PyTuple_GET_ITEM(made, 1));
  if (dst == nullptr && PyErr_Occurred()) {
    Py_DECREF(made);
    return nullptr;
  }
  if (bytes != 0) std::memcpy(dst, src.data, bytes);
  PyObject* tensor = PyTuple_GET_ITEM(made, 0);
  Py_INCREF(tensor);
  Py_DECREF(made);
  return tensor;
}

// The library-owned output of a completed handle as a new framework tensor (newTensorFrom).
PyObject* copyOutput(perseus_handle id, PyObject* allocate, PyObject* like,
                     const FlatTensor* view) {
  perseus_tensor out{};
  const perseus_status s = perseus_handle_output(id, 0, &out);
  if (s != PERSEUS_OK) return finish(s, "perseus_handle_output");
  return newTensorFrom(out, allocate, like, view);
}

// The rest of a wait whose first slice returned `waited` (Handle.wait()'s way, waitLate), then
// the handle's output as a new tensor (copyOutput).
PyObject* awaitOutput(perseus_handle id, perseus_status waited, PyObject* allocate, PyObject* like,
                      const FlatTensor* view) {
  ReleaseHandle release{id};
  if (waited == PERSEUS_ERR_IN_PROGRESS) {
    if (!waitLate(id)) return nullptr;
  } else if (waited != PERSEUS_OK) {
    return finish(waited, "perseus_wait");
  }
  return copyOutput(id, allocate, like, view);
}

// The blocking allgather of `t` into a tensor that allocate(shape, like) -> (tensor, address)
// makes, or with `view` copyOutput()'s way. The output's shape comes from the core, so ranks may
// differ in the first dimension as on the handle path.
PyObject* allgather(const char* name, FlatTensor& t, long process_set, PyObject* allocate,
                    PyObject* like, const FlatTensor* view) {
  perseus_handle id{};
  perseus_status submitted, waited = PERSEUS_OK;
  Py_BEGIN_ALLOW_THREADS;
  submitted = perseus_allgather(name, &t.t, static_cast<int32_t>(process_set), &id);
  if (submitted == PERSEUS_OK) waited = perseus_wait(id, kWaitSliceS);
  Py_END_ALLOW_THREADS;
  if (submitted != PERSEUS_OK) return finish(submitted, "perseus_allgather");
  return awaitOutput(id, waited, allocate, like, view);
}

// allgather_into(name, address, dtype, shape, process_set, allocate, dtype_object): a blocking
// allgather of a contiguous CPU tensor the caller keeps alive; returns the tensor that
// allocate(shape, dtype_object) -> (tensor, address) made for the result.
PyObject* allgatherInto(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (!exactCount("allgather_into", nargs, 7)) return nullptr;
  const char* name = PyUnicode_AsUTF8(args[0]);
  if (name == nullptr) return nullptr;
  FlatTensor t;
  if (!parseTensor(args[1], args[2], args[3], t)) return nullptr;
  const long process_set = PyLong_AsLong(args[4]);
  if (process_set == -1 && PyErr_Occurred()) return nullptr;
  return allgather(name, t, process_set, args[5], args[6], nullptr);
}

// What a small allgather's result is written to when the post path finishes it on the calling
// thread, before it is copied into the new tensor: the posted lane's largest input from each of
// up to 16 ranks. More, or larger, and the result stays in the handle's output.
constexpr size_t kGatherScratchBytes = 64u << 10;

// 1 when `tensor.requires_grad` is true, 0 when it is false or the type has no such attribute
// (no autograd), -1 with a Python error. A tensor in an autograd graph is the framework layer's
// to handle: its allgather records a gradient function.
int requiresGrad(PyObject* tensor) {
  static PyObject* const key = PyUnicode_InternFromString("requires_grad");
  if (key == nullptr) return -1;
  PyObject* value = PyObject_GetAttr(tensor, key);
  if (value == nullptr) {
    if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return -1;
    PyErr_Clear();
    return 0;
  }
  const int truth = PyObject_IsTrue(value);
  Py_DECREF(value);
  return truth;
}

// The bytes of a viewed tensor.
long long viewBytes(const FlatTensor& t) {
  long long bytes = dtypeSize(t.t.dtype);
  for (int32_t i = 0; i < t.t.ndim; ++i) bytes *= t.shape[i];
  return bytes;
}

// 1 with `t` filled when `tensor` is a tensor viewDenseCpu() reads, of at most `max_bytes`
// (an int) bytes, that does not require grad; 0 for any other tensor; -1 with a Python error.
int viewSmall(PyObject* tensor, PyObject* max_bytes, FlatTensor& t) {
  if (!viewDenseCpu(tensor, t)) return 0;
  const int grad = requiresGrad(tensor);
  if (grad != 0) return grad < 0 ? -1 : 0;
  const long long most = PyLong_AsLongLong(max_bytes);
  if (most == -1 && PyErr_Occurred()) return -1;
  return viewBytes(t) <= most ? 1 : 0;
}

}  // namespace

// allgather_tensor(tensor, name, process_set, max_bytes, allocate): allgather_into of a tensor
// of a registered type of at most max_bytes that does not require grad, the result made through
// the type's exchange API (else by allocate(shape, tensor)); NotImplemented, with no call, for
// any other tensor. A posted allgather finishes on the calling thread into a scratch buffer,
// with no handle.
PyObject* allgatherTensor(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (!exactCount("allgather_tensor", nargs, 5)) return nullptr;
  FlatTensor t;
  const int small = viewSmall(args[0], args[3], t);
  if (small < 0) return nullptr;
  if (small == 0) Py_RETURN_NOTIMPLEMENTED;
  const char* name = PyUnicode_AsUTF8(args[1]);
  if (name == nullptr) return nullptr;
  const long process_set = PyLong_AsLong(args[2]);
  if (process_set == -1 && PyErr_Occurred()) return nullptr;
  thread_local std::vector<unsigned char> scratch(kGatherScratchBytes);
  perseus_tensor result{};
  int64_t result_shape[PERSEUS_MAX_NDIM];
  perseus_handle id{};
  perseus_status submitted, waited = PERSEUS_OK;
  Py_BEGIN_ALLOW_THREADS;
  submitted =
      perseus_allgather_on_caller(name, &t.t, static_cast<int32_t>(process_set), scratch.data(),
                                  static_cast<int64_t>(scratch.size()), &result, result_shape, &id);
  if (submitted == PERSEUS_OK && id != 0) waited = perseus_wait(id, kWaitSliceS);
  Py_END_ALLOW_THREADS;
  if (submitted != PERSEUS_OK) return finish(submitted, "perseus_allgather_on_caller");
  if (id == 0) return newTensorFrom(result, args[4], args[0], &t);  // finished into scratch
  return awaitOutput(id, waited, args[4], args[0], &t);
}

namespace {

// The allreduce of `t` in place through a handle, waited for as Handle.wait() waits (a late
// one in slices: Ctrl-C interrupts it, and the stall diagnosis names this call's line, as it
// did for hvd.allreduce before it was one call). False with a Python error.
bool reduceInPlace(const TensorReduce& a, FlatTensor& t) {
  perseus_handle id{};
  perseus_status submitted, waited = PERSEUS_OK;
  Py_BEGIN_ALLOW_THREADS;
  submitted = perseus_allreduce(a.name, &t.t, &t.t, static_cast<int32_t>(a.op), a.prescale,
                                a.postscale, static_cast<int32_t>(a.process_set), &id);
  if (submitted == PERSEUS_OK) waited = perseus_wait(id, kWaitSliceS);
  Py_END_ALLOW_THREADS;
  if (submitted != PERSEUS_OK) return finish(submitted, "perseus_allreduce") != nullptr;
  ReleaseHandle release{id};
  if (waited == PERSEUS_ERR_IN_PROGRESS) return waitLate(id);
  if (waited != PERSEUS_OK) return finish(waited, "perseus_wait") != nullptr;
  return true;
}

}  // namespace

// allreduce_copy(tensor, name, op, prescale, postscale, process_set, max_bytes): the in-place
// allreduce of a copy of `tensor`, made through its type's exchange API, for a tensor of a
// registered type of at most max_bytes that does not require grad; NotImplemented, with no
// call, for any other tensor (or a type whose API cannot make one). For a small tensor the copy
// costs less than the asynchronous path's capsules, handle and autograd function.
PyObject* allreduceCopy(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (!exactCount("allreduce_copy", nargs, 7)) return nullptr;
  FlatTensor t;
  const int small = viewSmall(args[0], args[6], t);
  if (small < 0) return nullptr;
  if (small == 0) Py_RETURN_NOTIMPLEMENTED;
  const long long bytes = viewBytes(t);
  TensorReduce a;
  if (!parseTensorReduce(args, a)) return nullptr;
  void* data = nullptr;
  PyObject* out = newTensorLike(args[0], t, t.t.ndim, t.shape, &data);
  if (out == nullptr) {
    if (PyErr_Occurred()) return nullptr;
    Py_RETURN_NOTIMPLEMENTED;
  }
  if (bytes != 0) std::memcpy(data, t.t.data, static_cast<size_t>(bytes));
  FlatTensor copy = t;
  copy.t.shape = copy.shape;
  copy.t.data = dataOrPlaceholder(data);
  if (!reduceInPlace(a, copy)) {
    Py_DECREF(out);
    return nullptr;
  }
  return out;
}

namespace {

template <PyObject* (*Fn)(PyObject*, PyObject* const*, Py_ssize_t)>
PyCFunction asCFunction() {
  // METH_FASTCALL functions are stored as PyCFunction; the cast through void(*)() is the
  // documented way and keeps -Wcast-function-type quiet.
  return reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(Fn));
}

PyMethodDef kFastCalls[] = {
    {"allreduce_inplace", asCFunction<allreduceInplace>(), METH_FASTCALL,
     "allreduce_inplace(name, address, dtype, shape, op, prescale, postscale, process_set"
     "[, device, stream]): a blocking in-place allreduce of a contiguous tensor the caller "
     "keeps alive."},
    {"allreduce_on_stream", asCFunction<allreduceOnStream>(), METH_FASTCALL,
     "allreduce_on_stream(name, address, dtype, shape, op, prescale, postscale, process_set, "
     "device, stream): the in-place allreduce of a contiguous CUDA tensor the caller keeps "
     "alive, ordered on `stream`: returns once `stream` waits for it (no host block for the "
     "GPU work)."},
    {"broadcast_inplace", asCFunction<broadcastInplace>(), METH_FASTCALL,
     "broadcast_inplace(name, address, dtype, shape, root, process_set[, device, stream]): a "
     "blocking in-place broadcast of a contiguous tensor the caller keeps alive."},
    {"allreduce_tensor", asCFunction<allreduceTensor>(), METH_FASTCALL,
     "allreduce_tensor(tensor, name, op, prescale, postscale, process_set): a blocking "
     "in-place allreduce of a tensor of a registered type; returns it, or NotImplemented "
     "without a call for a tensor that is not a contiguous CPU tensor of a native dtype."},
    {"broadcast_tensor", asCFunction<broadcastTensor>(), METH_FASTCALL,
     "broadcast_tensor(tensor, name, root, process_set): allreduce_tensor's broadcast."},
    {"register_tensor_type", asCFunction<registerTensorType>(), METH_FASTCALL,
     "register_tensor_type(type, capsule): tensors of exactly `type` are read through the "
     "DLPack C exchange API in `capsule` (type.__dlpack_c_exchange_api__)."},
    {"allgather_tensor", asCFunction<allgatherTensor>(), METH_FASTCALL,
     "allgather_tensor(tensor, name, process_set, max_bytes, allocate): allgather_into of a "
     "tensor of a registered type of at most max_bytes that does not require grad, the result "
     "made through the type's exchange API or by allocate(shape, tensor); NotImplemented "
     "without a call for any other tensor."},
    {"allreduce_copy", asCFunction<allreduceCopy>(), METH_FASTCALL,
     "allreduce_copy(tensor, name, op, prescale, postscale, process_set, max_bytes): the "
     "blocking allreduce of a copy of a tensor of a registered type of at most max_bytes that "
     "does not require grad, returned; NotImplemented without a call for any other tensor."},
    {"allgather_into", asCFunction<allgatherInto>(), METH_FASTCALL,
     "allgather_into(name, address, dtype, shape, process_set, allocate, dtype_object): a "
     "blocking allgather of a contiguous CPU tensor; returns the tensor allocate(shape, "
     "dtype_object) -> (tensor, address) made for the result."},
    {nullptr, nullptr, 0, nullptr}};

}  // namespace

void registerFastCalls(pybind11::module_& m) {
  if (PyModule_AddFunctions(m.ptr(), kFastCalls) != 0) throw pybind11::error_already_set();
}

}  // namespace perseus_py
