// The torch.distributed backend's blocking allreduce as one C call: dist.all_reduce(t) without
// async_op reaches PerseusOps.allreduce(tensors, opts), whose reading of the options, the
// tensor, the current stream and the name cycle cost more in Python than the engine's whole
// small allreduce (bench/torch_distributed/percall_split.py). This call reads them all through C
// (the tensor and the stream through the DLPack exchange API, tensor_view.h) and makes the call
// as allreduce_on_stream does. Whatever it does not take it leaves untouched, for the Python
// method that calls it. Contract: the GIL held.
#include <Python.h>
#include <pybind11/pybind11.h>

#include <cstdint>

#include "fast_call_args.h"
#include "tensor_view.h"

namespace perseus_py {
namespace {

// What a group gives dist_allreduce, as its Python method builds it once.
struct GroupConfig {
  PyObject* names;      // {_signature_key: an endless iterator over names}
  PyObject* ops;        // {hash(ReduceOp): the core op} for the ops that need no prescale
  long process_set;     // the group's process set
  PyObject* completed;  // the group's completed Work, what a blocking call returns
};

bool parseConfig(PyObject* config, GroupConfig& out) {
  if (!PyTuple_CheckExact(config) || PyTuple_GET_SIZE(config) != 4) {
    PyErr_SetString(PyExc_TypeError, "config must be (names, ops, process_set, completed)");
    return false;
  }
  out.names = PyTuple_GET_ITEM(config, 0);
  out.ops = PyTuple_GET_ITEM(config, 1);
  out.process_set = PyLong_AsLong(PyTuple_GET_ITEM(config, 2));
  out.completed = PyTuple_GET_ITEM(config, 3);
  return !PyErr_Occurred();
}

// Whether the caller waits at once (opts.asyncOp is False); false, with no error set, for an
// asynchronous call or options without the field.
bool waitsAtOnce(PyObject* opts) {
  static PyObject* const async_op = PyUnicode_InternFromString("asyncOp");
  PyObject* value = PyObject_GetAttr(opts, async_op);
  if (value == nullptr) {
    PyErr_Clear();
    return false;
  }
  const bool waits = value == Py_False;
  Py_DECREF(value);
  return waits;
}

// The core op of opts.reduceOp when it needs no prescale, else -1 with no error set. torch binds
// hash(ReduceOp) as its RedOpType's value (the Python side checked that before it gave `ops`).
long plainOp(PyObject* opts, PyObject* ops) {
  static PyObject* const reduce_op = PyUnicode_InternFromString("reduceOp");
  PyObject* op = PyObject_GetAttr(opts, reduce_op);
  if (op == nullptr) {
    PyErr_Clear();
    return -1;
  }
  const Py_hash_t hash = PyObject_Hash(op);
  Py_DECREF(op);
  PyObject* key = hash == -1 ? nullptr : PyLong_FromSsize_t(hash);
  PyObject* code = key == nullptr ? nullptr : PyDict_GetItemWithError(ops, key);
  Py_XDECREF(key);
  const long out = code == nullptr ? -1 : PyLong_AsLong(code);
  PyErr_Clear();
  return out;
}

// The next name of the tensor's signature (a new reference), or null with no error set when
// there is none. The key is _signature_key's, count * 16 + the core's dtype code; looked up as
// Python would, so that the group's _NameCycles makes a signature's cycle on its first call.
PyObject* nextName(PyObject* names, const FlatTensor& t) {
  long long count = 1;
  for (int32_t i = 0; i < t.t.ndim; ++i) count *= t.shape[i];
  PyObject* key = PyLong_FromLongLong(count * 16 + t.t.dtype);
  PyObject* cycle = key == nullptr ? nullptr : PyObject_GetItem(names, key);
  Py_XDECREF(key);
  PyObject* name = cycle == nullptr ? nullptr : PyIter_Next(cycle);
  Py_XDECREF(cycle);
  if (name != nullptr && PyUnicode_Check(name)) return name;
  Py_XDECREF(name);
  PyErr_Clear();
  return nullptr;
}

// dist_allreduce(tensors, opts, config): the blocking allreduce of tensors[0] when the call
// waits at once, the op needs no prescale, the tensor is a contiguous CPU or CUDA tensor of a
// registered type and a native dtype. Returns the group's completed Work; the name taken, as a
// str, when that name's last use is still in flight (the caller submits it asynchronously);
// NotImplemented, having taken nothing, for any other call; null with the engine's error.
PyObject* distAllreduce(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  GroupConfig group;
  if (!exactCount("dist_allreduce", nargs, 3) || !parseConfig(args[2], group)) return nullptr;
  PyObject* tensors = args[0];
  if (!PyList_CheckExact(tensors) || PyList_GET_SIZE(tensors) != 1 || !waitsAtOnce(args[1])) {
    Py_RETURN_NOTIMPLEMENTED;
  }
  const long op = plainOp(args[1], group.ops);
  PyObject* tensor = PyList_GET_ITEM(tensors, 0);
  FlatTensor t;
  if (op < 0 || !viewDenseOnCurrentStream(tensor, t)) Py_RETURN_NOTIMPLEMENTED;
  PyObject* name = nextName(group.names, t);
  if (name == nullptr) Py_RETURN_NOTIMPLEMENTED;
  const char* name_utf8 = PyUnicode_AsUTF8(name);
  if (name_utf8 == nullptr) {
    Py_DECREF(name);
    return nullptr;
  }
  const perseus_status status = allreduceOnItsStream(name_utf8, t, op, 1.0, 1.0, group.process_set);
  if (status == PERSEUS_ERR_DUPLICATE_NAME) return name;
  Py_DECREF(name);
  if (status != PERSEUS_OK) return finish(status, "perseus_allreduce_on_stream");
  Py_INCREF(group.completed);
  return group.completed;
}

PyMethodDef kDistAllreduce[] = {
    {"dist_allreduce", asCFunction<distAllreduce>(), METH_FASTCALL,
     "dist_allreduce(tensors, opts, config): the torch.distributed backend's blocking "
     "allreduce of tensors[0] with config (names, ops, process_set, completed); returns "
     "completed, the name taken when it is still in flight, or NotImplemented having taken "
     "nothing."},
    {nullptr, nullptr, 0, nullptr}};

}  // namespace

void registerDistAllreduce(pybind11::module_& m) {
  if (PyModule_AddFunctions(m.ptr(), kDistAllreduce) != 0) throw pybind11::error_already_set();
}

}  // namespace perseus_py
