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

#include "errors.h"
#include "fast_call_args.h"
#include "perseus/c_api.h"
#include "tensor_view.h"

namespace perseus_py {

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

// The call's result: None, or the Python exception of a failed status.
PyObject* finish(perseus_status status, const char* what) {
  if (status == PERSEUS_OK) Py_RETURN_NONE;
  setStatusError(status, statusMessage(status, what));
  return nullptr;
}

bool exactCount(const char* fn, Py_ssize_t nargs, Py_ssize_t expected) {
  if (nargs == expected) return true;
  PyErr_Format(PyExc_TypeError, "%s takes %zd positional arguments (%zd given)", fn, expected,
               nargs);
  return false;
}

// The (name, op, prescale, postscale, process_set) after the tensor of allreduce_tensor and
// allreduce_copy.
bool parseTensorReduce(PyObject* const* args, TensorReduce& a) {
  a.name = PyUnicode_AsUTF8(args[1]);
  if (a.name == nullptr) return false;
  a.op = PyLong_AsLong(args[2]);
  a.prescale = PyFloat_AsDouble(args[3]);
  a.postscale = PyFloat_AsDouble(args[4]);
  a.process_set = PyLong_AsLong(args[5]);
  return !PyErr_Occurred();
}

perseus_status allreduceOnItsStream(const char* name, FlatTensor& t, long op, double prescale,
                                    double postscale, long process_set) {
  const auto op32 = static_cast<int32_t>(op);
  const auto set32 = static_cast<int32_t>(process_set);
  perseus_status status;
  Py_BEGIN_ALLOW_THREADS;
  status = perseus_allreduce_on_stream(name, &t.t, &t.t, op32, prescale, postscale, set32,
                                       t.t.cuda_stream);
  Py_END_ALLOW_THREADS;
  return status;
}

namespace {

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
  return finish(allreduceOnItsStream(a.name, a.t, a.op, a.prescale, a.postscale, a.process_set),
                "perseus_allreduce_on_stream");
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
    {nullptr, nullptr, 0, nullptr}};

}  // namespace

void registerFastCalls(pybind11::module_& m) {
  if (PyModule_AddFunctions(m.ptr(), kFastCalls) != 0) throw pybind11::error_already_set();
}

}  // namespace perseus_py
