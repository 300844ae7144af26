// The extension's blocking fast calls that return a new tensor: allgather_into (a tensor given
// by address), allgather_tensor and allreduce_copy (a tensor of a registered type, tensor_view.h).
// The result is copied into a tensor the framework makes, through its exchange API where it can
// (no Python call), else by the caller's allocate(shape, like) -> (tensor, address): for small
// results a copy costs less than handing the library's memory over through a DLPack capsule.
// A late wait goes on in slices as Handle.wait() does, so Ctrl-C interrupts it and the stall
// diagnosis names the caller's line.
#include <Python.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "errors.h"
#include "fast_call_args.h"
#include "fast_calls.h"
#include "handle.h"
#include "perseus/c_api.h"
#include "tensor_arg.h"
#include "tensor_view.h"

namespace perseus_py {
namespace {

// Releases a library handle on every way out.
struct ReleaseHandle {
  perseus_handle id;
  ~ReleaseHandle() { perseus_release(id); }
};

constexpr double kWaitSliceS = 0.25;

// Up to this many bytes of input an allgather's result may be copied out of the library's memory
// into a new tensor (bench/small_ops/README.md): below it, the copy costs less than handing that
// memory over through a DLPack capsule. perseus.torch's _ALLGATHER_COPY_MAX is the same bound
// for the allgathers it makes by address (allgather_into).
constexpr long long kCopyOutputMaxBytes = 64 * 1024;

// How a late wait ended: done, failed (with a Python error; the collective is over), or
// interrupted by a signal (with a Python error; the collective may still be running).
enum class Waited { kDone, kFailed, kInterrupted };

// Goes on waiting, as Handle.wait() does, for a handle that did not complete within a first
// slice: in slices, so that Ctrl-C interrupts a long wait, and noting the call site for the
// stall diagnosis (only late ops pay for it).
Waited waitLate(perseus_handle id) {
  noteCallSite(id);
  for (;;) {
    if (PyErr_CheckSignals() != 0) return Waited::kInterrupted;
    perseus_status s;
    Py_BEGIN_ALLOW_THREADS;
    s = perseus_wait(id, kWaitSliceS);
    Py_END_ALLOW_THREADS;
    if (s == PERSEUS_OK) return Waited::kDone;
    if (s != PERSEUS_ERR_IN_PROGRESS) {
      setStatusError(s, statusMessage(s, "perseus_wait"));
      return Waited::kFailed;
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

// What a collective that a signal interrupted the wait for may still read or write: never
// freed (a small tensor or two per interrupted call), rather than freed under it. Null: none.
void keepForInterrupted(PyObject* obj) { Py_XINCREF(obj); }

// The rest of a wait whose first slice returned `waited` (Handle.wait()'s way, waitLate), then
// the handle's output as a new tensor (copyOutput). `input`: the input's tensor object, if any.
PyObject* awaitOutput(perseus_handle id, perseus_status waited, PyObject* allocate, PyObject* like,
                      const FlatTensor* view, PyObject* input) {
  ReleaseHandle release{id};
  if (waited == PERSEUS_ERR_IN_PROGRESS) {
    const Waited late = waitLate(id);
    if (late == Waited::kInterrupted) keepForInterrupted(input);
    if (late != Waited::kDone) return nullptr;  // the output is the handle's
  } else if (waited != PERSEUS_OK) {
    return finish(waited, "perseus_wait");
  }
  return copyOutput(id, allocate, like, view);
}

// The blocking allgather of `t` into a tensor that allocate(shape, like) -> (tensor, address)
// makes, or with `view` copyOutput()'s way. The output's shape comes from the core, so ranks may
// differ in the first dimension as on the handle path.
PyObject* allgather(const char* name, FlatTensor& t, long process_set, PyObject* allocate,
                    PyObject* like, const FlatTensor* view, PyObject* input) {
  perseus_handle id{};
  perseus_status submitted, waited = PERSEUS_OK;
  Py_BEGIN_ALLOW_THREADS;
  submitted = perseus_allgather(name, &t.t, static_cast<int32_t>(process_set), &id);
  if (submitted == PERSEUS_OK) waited = perseus_wait(id, kWaitSliceS);
  Py_END_ALLOW_THREADS;
  if (submitted != PERSEUS_OK) return finish(submitted, "perseus_allgather");
  return awaitOutput(id, waited, allocate, like, view, input);
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
  return allgather(name, t, process_set, args[5], args[6], nullptr, nullptr);
}

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

// The bytes of a result of `ndim` dimensions `shape` of the viewed tensor's dtype.
size_t resultBytes(const FlatTensor& t, int32_t ndim, const int64_t* shape) {
  auto bytes = static_cast<size_t>(dtypeSize(t.t.dtype));
  for (int32_t i = 0; i < ndim; ++i) bytes *= static_cast<size_t>(shape[i]);
  return bytes;
}

// An opened call (perseus_open_*) finished into a buffer that nobody reads, for a caller that
// could not make its output: a generation this rank never finishes would keep the name in
// flight for good. Left so only when not even that buffer can be had.
void finishDropped(const perseus_opened& opened, size_t bytes) {
  auto* sink = static_cast<unsigned char*>(std::malloc(bytes == 0 ? 1 : bytes));
  if (sink == nullptr) return;
  perseus_handle id = 0;
  Py_BEGIN_ALLOW_THREADS;
  if (perseus_finish_opened(&opened, sink, &id) == PERSEUS_OK && id != 0) {
    perseus_wait(id, -1);  // it writes into `sink` until it completes
    perseus_release(id);
  }
  Py_END_ALLOW_THREADS;
  std::free(sink);
}

// The output of an opened call: a new tensor like `view` (`like`'s type, newTensorLike) of
// `ndim` dimensions `shape`, made while the other ranks' posts are on their way, then the call
// finished into it. *id is 0 when it is done, else the late call's handle to wait for. Null
// with a Python error when it fails (the call is finished all the same, finishDropped()).
PyObject* finishIntoNew(const perseus_opened& opened, PyObject* like, const FlatTensor& view,
                        int32_t ndim, const int64_t* shape, perseus_handle* id) {
  void* data = nullptr;
  PyObject* out = newTensorLike(like, view, ndim, shape, &data);
  if (out == nullptr) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "the tensor type made no tensor");
    PyObject *type, *value, *trace;
    PyErr_Fetch(&type, &value, &trace);
    finishDropped(opened, resultBytes(view, ndim, shape));
    PyErr_Restore(type, value, trace);
    return nullptr;
  }
  perseus_status finished;
  Py_BEGIN_ALLOW_THREADS;
  finished = perseus_finish_opened(&opened, dataOrPlaceholder(data), id);
  Py_END_ALLOW_THREADS;
  if (finished != PERSEUS_OK) {
    Py_DECREF(out);
    return finish(finished, "perseus_finish_opened");
  }
  return out;
}

// The posted allgather of `t`, opened (perseus_open_allgather) and finished into a new tensor
// of `like`'s type; NotImplemented when the post path did not take it (nothing was submitted).
PyObject* allgatherOpened(const char* name, FlatTensor& t, PyObject* like, PyObject* allocate) {
  perseus_opened opened{};
  int64_t shape[PERSEUS_MAX_NDIM];
  int32_t ndim = 0;
  perseus_status status;
  Py_BEGIN_ALLOW_THREADS;
  status = perseus_open_allgather(name, &t.t, shape, &ndim, &opened);
  Py_END_ALLOW_THREADS;
  if (status != PERSEUS_OK) return finish(status, "perseus_open_allgather");
  if (opened.open == 0) Py_RETURN_NOTIMPLEMENTED;
  perseus_handle id = 0;
  PyObject* out = finishIntoNew(opened, like, t, ndim, shape, &id);
  if (out == nullptr || id == 0) return out;
  // Late: the result is the handle's, whose shape is the negotiated one if the post fell back.
  Py_DECREF(out);
  return awaitOutput(id, PERSEUS_ERR_IN_PROGRESS, allocate, like, &t, like);
}

}  // namespace

// allgather_tensor(tensor, name, process_set, max_bytes, allocate): the blocking allgather of a
// tensor of a registered type of at most max_bytes that does not require grad, its result a new
// tensor made through the type's exchange API (else by allocate(shape, tensor)); NotImplemented,
// with no call, for any other tensor. A posted allgather of the global set is opened, then
// finished into the new tensor, which is made while the other ranks' posts are on their way.
// Above kCopyOutputMaxBytes only that way: an input the post path does not take is declined
// (NotImplemented, nothing submitted), because copying the library's output would cost a pass
// over it that the caller's handle path, sharing that memory, does not.
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
  const bool copies = viewBytes(t) <= kCopyOutputMaxBytes;
  if (process_set == 0 && makesTensors(args[0])) {
    PyObject* out = allgatherOpened(name, t, args[0], args[4]);
    if (out != Py_NotImplemented || !copies) return out;
    Py_DECREF(out);
  }
  if (!copies) Py_RETURN_NOTIMPLEMENTED;
  return allgather(name, t, process_set, args[4], args[0], &t, args[0]);
}

namespace {

// The allreduce of `t` in place through a handle, waited for as Handle.wait() waits (a late
// one in slices: Ctrl-C interrupts it, and the stall diagnosis names this call's line, as it
// did for hvd.allreduce before it was one call). kFailed and kInterrupted with a Python error.
Waited reduceInPlace(const TensorReduce& a, FlatTensor& t) {
  perseus_handle id{};
  perseus_status submitted, waited = PERSEUS_OK;
  Py_BEGIN_ALLOW_THREADS;
  submitted = perseus_allreduce(a.name, &t.t, &t.t, static_cast<int32_t>(a.op), a.prescale,
                                a.postscale, static_cast<int32_t>(a.process_set), &id);
  if (submitted == PERSEUS_OK) waited = perseus_wait(id, kWaitSliceS);
  Py_END_ALLOW_THREADS;
  if (submitted != PERSEUS_OK) {
    finish(submitted, "perseus_allreduce");
    return Waited::kFailed;
  }
  ReleaseHandle release{id};
  if (waited == PERSEUS_ERR_IN_PROGRESS) return waitLate(id);
  if (waited != PERSEUS_OK) {
    finish(waited, "perseus_wait");
    return Waited::kFailed;
  }
  return Waited::kDone;
}

// `out`, the tensor that a late allreduce of `input` (a tensor object, or null) writes into,
// once its wait ended as `waited`; an interrupted one keeps both (keepForInterrupted).
PyObject* afterWait(Waited waited, PyObject* out, PyObject* input) {
  if (waited == Waited::kDone) return out;
  if (waited == Waited::kFailed) Py_DECREF(out);
  if (waited == Waited::kInterrupted) keepForInterrupted(input);  // and `out`, not dropped
  return nullptr;
}

// The posted allreduce of `t`, opened (perseus_open_allreduce) and finished into a new tensor of
// `like`'s type, made while the other ranks' posts are on their way; NotImplemented when the
// post path did not take it (nothing was submitted).
PyObject* allreduceOpened(const TensorReduce& a, FlatTensor& t, PyObject* like) {
  perseus_opened opened{};
  perseus_status status;
  Py_BEGIN_ALLOW_THREADS;
  status = perseus_open_allreduce(a.name, &t.t, static_cast<int32_t>(a.op), a.prescale, a.postscale,
                                  &opened);
  Py_END_ALLOW_THREADS;
  if (status != PERSEUS_OK) return finish(status, "perseus_open_allreduce");
  if (opened.open == 0) Py_RETURN_NOTIMPLEMENTED;
  perseus_handle id = 0;
  PyObject* out = finishIntoNew(opened, like, t, t.t.ndim, t.shape, &id);
  if (out == nullptr || id == 0) return out;
  // Late: the handle writes the result into `out` when it completes.
  ReleaseHandle release{id};
  return afterWait(waitLate(id), out, like);
}

// A copy of `t` (a new tensor of `like`'s type) reduced in place through a handle.
PyObject* allreduceCopied(const TensorReduce& a, FlatTensor& t, PyObject* like) {
  void* data = nullptr;
  PyObject* out = newTensorLike(like, t, t.t.ndim, t.shape, &data);
  if (out == nullptr) {
    if (PyErr_Occurred()) return nullptr;
    Py_RETURN_NOTIMPLEMENTED;
  }
  const long long bytes = viewBytes(t);
  if (bytes != 0) std::memcpy(data, t.t.data, static_cast<size_t>(bytes));
  FlatTensor copy = t;
  copy.t.shape = copy.shape;
  copy.t.data = dataOrPlaceholder(data);
  return afterWait(reduceInPlace(a, copy), out, nullptr);
}

}  // namespace

// allreduce_copy(tensor, name, op, prescale, postscale, process_set, max_bytes): the blocking
// allreduce of `tensor` into a new tensor made through its type's exchange API, for a tensor of
// a registered type of at most max_bytes that does not require grad; NotImplemented, with no
// call, for any other tensor (or a type whose API cannot make one). A posted allreduce of the
// global set is opened, then finished into the new tensor, which is made while the other ranks'
// posts are on their way; otherwise a copy is reduced in place through a handle. For a small
// tensor either costs less than the asynchronous path's capsules, handle and autograd function.
PyObject* allreduceCopy(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (!exactCount("allreduce_copy", nargs, 7)) return nullptr;
  FlatTensor t;
  const int small = viewSmall(args[0], args[6], t);
  if (small < 0) return nullptr;
  if (small == 0 || !makesTensors(args[0])) Py_RETURN_NOTIMPLEMENTED;
  TensorReduce a;
  if (!parseTensorReduce(args, a)) return nullptr;
  if (a.process_set == 0) {
    PyObject* out = allreduceOpened(a, t, args[0]);
    if (out != Py_NotImplemented) return out;
    Py_DECREF(out);
  }
  return allreduceCopied(a, t, args[0]);
}

namespace {

// new_tensor_like(tensor): a new tensor of `tensor`'s type, dtype and shape, its data not
// written, made as the calls above make their results; NotImplemented for a tensor they do not
// read. For benchmarks: what a call that returns a new tensor pays for it at least.
PyObject* newTensorLikeCall(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (!exactCount("new_tensor_like", nargs, 1)) return nullptr;
  FlatTensor t;
  if (!viewDenseCpu(args[0], t) || !makesTensors(args[0])) Py_RETURN_NOTIMPLEMENTED;
  void* data = nullptr;
  return newTensorLike(args[0], t, t.t.ndim, t.shape, &data);
}

PyMethodDef kFastOutputs[] = {
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
    {"new_tensor_like", asCFunction<newTensorLikeCall>(), METH_FASTCALL,
     "new_tensor_like(tensor): a new tensor like `tensor`, its data not written, made as "
     "allgather_tensor and allreduce_copy make their results (for benchmarks); NotImplemented "
     "for a tensor they do not read."},
    {nullptr, nullptr, 0, nullptr}};

}  // namespace

void registerFastOutputs(pybind11::module_& m) {
  if (PyModule_AddFunctions(m.ptr(), kFastOutputs) != 0) throw pybind11::error_already_set();
}

}  // namespace perseus_py
