// Blocking in-place allreduce and broadcast for the framework layers' fast path: the caller
// passes a dense, contiguous CPU tensor as (address, dtype, shape) and keeps it alive for the
// call, so no DLPack capsule, TensorArg or Handle is built. These are plain CPython FASTCALL
// functions: pybind11's overload dispatch, keyword matching and argument casters cost about as
// much as the engine's whole small allreduce (bench/small_ops/README.md has the split).
// Every check of the core still runs: names, dtypes and shapes are matched across ranks there.
#include <Python.h>

#include <cstdint>

#include "errors.h"
#include "perseus/c_api.h"

namespace perseus_py {
namespace {

// A tensor described by its address, dtype code and shape tuple (torch.Size is a tuple).
struct FlatTensor {
  int64_t shape[PERSEUS_MAX_NDIM];
  perseus_tensor t{};
};

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
  if (data == nullptr) {
    // Frameworks give empty tensors no storage; the core wants a pointer it never reads.
    static char empty_storage alignas(16)[16];
    data = empty_storage;
  }
  out.t.data = data;
  out.t.dtype = static_cast<int32_t>(code);
  out.t.ndim = static_cast<int32_t>(ndim);
  out.t.shape = out.shape;
  out.t.device = PERSEUS_DEVICE_CPU;
  out.t.cuda_stream = nullptr;
  return true;
}

bool argCount(const char* fn, Py_ssize_t nargs, Py_ssize_t expected) {
  if (nargs == expected) return true;
  PyErr_Format(PyExc_TypeError, "%s takes %zd positional arguments (%zd given)", fn, expected,
               nargs);
  return false;
}

// The call's result: None, or the Python exception of a failed status.
PyObject* finish(perseus_status status, const char* what) {
  if (status == PERSEUS_OK) Py_RETURN_NONE;
  setStatusError(status, statusMessage(status, what));
  return nullptr;
}

// allreduce_inplace(name, address, dtype, shape, op, prescale, postscale, process_set)
PyObject* allreduceInplace(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (!argCount("allreduce_inplace", nargs, 8)) return nullptr;
  const char* name = PyUnicode_AsUTF8(args[0]);
  if (name == nullptr) return nullptr;
  FlatTensor t;
  if (!parseTensor(args[1], args[2], args[3], t)) return nullptr;
  const long op = PyLong_AsLong(args[4]);
  const double prescale = PyFloat_AsDouble(args[5]);
  const double postscale = PyFloat_AsDouble(args[6]);
  const long process_set = PyLong_AsLong(args[7]);
  if (PyErr_Occurred()) return nullptr;
  perseus_status status;
  Py_BEGIN_ALLOW_THREADS;
  status = perseus_allreduce_blocking(name, &t.t, &t.t, static_cast<int32_t>(op), prescale,
                                      postscale, static_cast<int32_t>(process_set));
  Py_END_ALLOW_THREADS;
  return finish(status, "perseus_allreduce_blocking");
}

// broadcast_inplace(name, address, dtype, shape, root, process_set)
PyObject* broadcastInplace(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (!argCount("broadcast_inplace", nargs, 6)) return nullptr;
  const char* name = PyUnicode_AsUTF8(args[0]);
  if (name == nullptr) return nullptr;
  FlatTensor t;
  if (!parseTensor(args[1], args[2], args[3], t)) return nullptr;
  const long root = PyLong_AsLong(args[4]);
  const long process_set = PyLong_AsLong(args[5]);
  if (PyErr_Occurred()) return nullptr;
  perseus_status status;
  Py_BEGIN_ALLOW_THREADS;
  status = perseus_broadcast_blocking(name, &t.t, &t.t, static_cast<int32_t>(root),
                                      static_cast<int32_t>(process_set));
  Py_END_ALLOW_THREADS;
  return finish(status, "perseus_broadcast_blocking");
}

template <PyObject* (*Fn)(PyObject*, PyObject* const*, Py_ssize_t)>
PyCFunction asCFunction() {
  // METH_FASTCALL functions are stored as PyCFunction; the cast through void(*)() is the
  // documented way and keeps -Wcast-function-type quiet.
  return reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(Fn));
}

PyMethodDef kFastCalls[] = {
    {"allreduce_inplace", asCFunction<allreduceInplace>(), METH_FASTCALL,
     "allreduce_inplace(name, address, dtype, shape, op, prescale, postscale, process_set): "
     "a blocking in-place allreduce of a contiguous CPU tensor the caller keeps alive."},
    {"broadcast_inplace", asCFunction<broadcastInplace>(), METH_FASTCALL,
     "broadcast_inplace(name, address, dtype, shape, root, process_set): a blocking in-place "
     "broadcast of a contiguous CPU tensor the caller keeps alive."},
    {nullptr, nullptr, 0, nullptr}};

}  // namespace

void registerFastCalls(pybind11::module_& m) {
  if (PyModule_AddFunctions(m.ptr(), kFastCalls) != 0) throw pybind11::error_already_set();
}

}  // namespace perseus_py
