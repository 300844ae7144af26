// A framework layer's blocking collectives as C functions: hvd.allreduce, hvd.allreduce_,
// hvd.broadcast_ and hvd.allgather are these, so that a call a user makes reaches the tensor
// fast calls (fast_calls.h) with no Python frame. The frame, its keyword matching and its global
// lookups were about a fifth of a small allreduce_ (bench/small_ops/README.md). Each entry binds
// its arguments as the Python function it stands for would, takes the fast call when the Python
// function would (a named call of the global set, the same op table), and otherwise calls that
// function with the arguments unchanged: it raises what Python raises for a wrong call, and
// takes every other path (another process set, a CUDA tensor, a gradient).
#include <Python.h>
#include <pybind11/pybind11.h>

#include <array>
#include <iterator>

#include "call_site.h"
#include "fast_call_args.h"
#include "fast_calls.h"

namespace perseus_py {
namespace {

// The entry's state, its `self`: (fallback, global_set, config), config being what the entry
// says it is.
enum : Py_ssize_t { kFallback, kGlobalSet, kConfig, kStateSize };

PyObject* fallback(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
#if PY_VERSION_HEX >= 0x03090000
  return PyObject_Vectorcall(PyTuple_GET_ITEM(self, kFallback), args, nargs, kwnames);
#else
  return _PyObject_Vectorcall(PyTuple_GET_ITEM(self, kFallback), args, nargs, kwnames);
#endif
}

// Binds positional and keyword arguments to the parameters `names` (interned) as a Python call
// would: false when the call is not one Python would accept as written (too many arguments, an
// unknown or repeated keyword), which the fallback then reports. Unbound parameters stay null.
template <size_t N>
bool bind(const std::array<PyObject*, N>& names, PyObject* const* args, Py_ssize_t nargs,
          PyObject* kwnames, PyObject* (&bound)[N]) {
  if (nargs > static_cast<Py_ssize_t>(N)) return false;
  for (Py_ssize_t i = 0; i < nargs; ++i) bound[i] = args[i];
  const Py_ssize_t nkw = kwnames == nullptr ? 0 : PyTuple_GET_SIZE(kwnames);
  for (Py_ssize_t k = 0; k < nkw; ++k) {
    PyObject* key = PyTuple_GET_ITEM(kwnames, k);
    size_t at = 0;
    while (at < N && names[at] != key) ++at;  // a call site's keywords are interned
    if (at == N) {
      at = 0;
      while (at < N && PyUnicode_Compare(names[at], key) != 0) ++at;
    }
    if (at == N || bound[at] != nullptr) return false;
    bound[at] = args[nargs + k];
  }
  return bound[0] != nullptr;
}

// Each entry's parameters, in its Python function's order: fast_entry() refuses a function
// with others, so that an entry never accepts a call its function would refuse.
constexpr const char* kAllreduceInplaceParams[] = {
    "tensor", "average", "name", "op", "prescale_factor", "postscale_factor", "process_set"};
constexpr const char* kAllreduceParams[] = {"tensor",           "average",    "name",
                                            "compression",      "op",         "prescale_factor",
                                            "postscale_factor", "process_set"};
constexpr const char* kBroadcastParams[] = {"tensor", "root_rank", "name", "process_set"};
constexpr const char* kAllgatherParams[] = {"tensor", "name", "process_set"};

template <size_t N>
std::array<PyObject*, N> interned(const char* const (&params)[N]) {
  std::array<PyObject*, N> out{};
  for (size_t i = 0; i < N; ++i) out[i] = PyUnicode_InternFromString(params[i]);
  return out;
}

bool globalSet(PyObject* self, PyObject* process_set) {
  return process_set == nullptr || process_set == PyTuple_GET_ITEM(self, kGlobalSet);
}

// The fast call's result, else (NotImplemented) the fallback's. The fast call runs inside an
// InPerseusCall (call_site.h): a late collective's stall report then names the user's line that
// waits for it, which the fallback's own Python frames show.
template <typename FastCall>
PyObject* orFallback(FastCall call, PyObject* self, PyObject* const* args, Py_ssize_t nargs,
                     PyObject* kwnames) {
  PyObject* result;
  {
    const InPerseusCall marked;
    result = call();
  }
  if (result != Py_NotImplemented) return result;
  Py_DECREF(result);
  return fallback(self, args, nargs, kwnames);
}

// allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
//            postscale_factor=1.0, process_set=global_process_set); config: the op table
PyObject* allreduceEntry(PyObject* self, PyObject* const* args, Py_ssize_t nargs,
                         PyObject* kwnames) {
  static const auto names = interned(kAllreduceInplaceParams);
  static PyObject* const one = PyFloat_FromDouble(1.0);
  static PyObject* const zero = PyLong_FromLong(0);
  PyObject* a[7] = {};
  if (!bind(names, args, nargs, kwnames, a) || (a[1] != nullptr && a[1] != Py_None) ||
      a[2] == nullptr || !PyUnicode_CheckExact(a[2]) || !globalSet(self, a[6])) {
    return fallback(self, args, nargs, kwnames);
  }
  // The op table's entry, as _DIRECT_OPS.get(op): absent (or unhashable) for ops it lacks.
  PyObject* op =
      PyDict_GetItemWithError(PyTuple_GET_ITEM(self, kConfig), a[3] == nullptr ? Py_None : a[3]);
  if (op == nullptr) {
    PyErr_Clear();
    return fallback(self, args, nargs, kwnames);
  }
  PyObject* call[6] = {a[0], a[2], op, a[4] ? a[4] : one, a[5] ? a[5] : one, zero};
  return orFallback([&] { return allreduceTensor(nullptr, call, 6); }, self, args, nargs, kwnames);
}

// allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
//           prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set); config:
// (op table, Compression.none, the most bytes copied)
PyObject* allreduceCopyEntry(PyObject* self, PyObject* const* args, Py_ssize_t nargs,
                             PyObject* kwnames) {
  static const auto names = interned(kAllreduceParams);
  static PyObject* const one = PyFloat_FromDouble(1.0);
  static PyObject* const zero = PyLong_FromLong(0);
  PyObject* config = PyTuple_GET_ITEM(self, kConfig);
  PyObject* a[8] = {};
  if (!bind(names, args, nargs, kwnames, a) || (a[1] != nullptr && a[1] != Py_None) ||
      a[2] == nullptr || !PyUnicode_CheckExact(a[2]) ||
      (a[3] != nullptr && a[3] != PyTuple_GET_ITEM(config, 1)) || !globalSet(self, a[7])) {
    return fallback(self, args, nargs, kwnames);
  }
  PyObject* op =
      PyDict_GetItemWithError(PyTuple_GET_ITEM(config, 0), a[4] == nullptr ? Py_None : a[4]);
  if (op == nullptr) {
    PyErr_Clear();
    return fallback(self, args, nargs, kwnames);
  }
  PyObject* call[7] = {
      a[0], a[2], op, a[5] ? a[5] : one, a[6] ? a[6] : one, zero, PyTuple_GET_ITEM(config, 2)};
  return orFallback([&] { return allreduceCopy(nullptr, call, 7); }, self, args, nargs, kwnames);
}

// broadcast_(tensor, root_rank, name=None, process_set=global_process_set)
PyObject* broadcastEntry(PyObject* self, PyObject* const* args, Py_ssize_t nargs,
                         PyObject* kwnames) {
  static const auto names = interned(kBroadcastParams);
  static PyObject* const zero = PyLong_FromLong(0);
  PyObject* a[4] = {};
  if (!bind(names, args, nargs, kwnames, a) || a[1] == nullptr || !PyLong_CheckExact(a[1]) ||
      a[2] == nullptr || !PyUnicode_CheckExact(a[2]) || !globalSet(self, a[3])) {
    return fallback(self, args, nargs, kwnames);
  }
  PyObject* call[4] = {a[0], a[2], a[1], zero};
  return orFallback([&] { return broadcastTensor(nullptr, call, 4); }, self, args, nargs, kwnames);
}

// allgather(tensor, name=None, process_set=global_process_set); config: (max_bytes, allocate)
PyObject* allgatherEntry(PyObject* self, PyObject* const* args, Py_ssize_t nargs,
                         PyObject* kwnames) {
  static const auto names = interned(kAllgatherParams);
  static PyObject* const zero = PyLong_FromLong(0);
  PyObject* a[3] = {};
  if (!bind(names, args, nargs, kwnames, a) || a[1] == nullptr || !PyUnicode_CheckExact(a[1]) ||
      !globalSet(self, a[2])) {
    return fallback(self, args, nargs, kwnames);
  }
  PyObject* config = PyTuple_GET_ITEM(self, kConfig);
  PyObject* call[5] = {a[0], a[1], zero, PyTuple_GET_ITEM(config, 0), PyTuple_GET_ITEM(config, 1)};
  return orFallback([&] { return allgatherTensor(nullptr, call, 5); }, self, args, nargs, kwnames);
}

// One definition per entry, alive for the process: the functions made from them point to it.
PyMethodDef kEntries[] = {
    {"allreduce_", asCFunction<allreduceEntry>(), METH_FASTCALL | METH_KEYWORDS,
     "allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, "
     "postscale_factor=1.0, process_set=global_process_set)\n\nIn-place allreduce of `tensor` "
     "over the set (op=None means Average); returns `tensor` when done."},
    {"allreduce", asCFunction<allreduceCopyEntry>(), METH_FASTCALL | METH_KEYWORDS,
     "allreduce(tensor, average=None, name=None, compression=Compression.none, op=None, "
     "prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set)\n\nReduces "
     "`tensor` over the set (op=None: Average) and returns a new tensor; its gradient is the "
     "allreduce of the gradient with the same op and factors."},
    {"broadcast_", asCFunction<broadcastEntry>(), METH_FASTCALL | METH_KEYWORDS,
     "broadcast_(tensor, root_rank, name=None, process_set=global_process_set)\n\nIn-place "
     "broadcast of root_rank's `tensor`; returns `tensor` when done."},
    {"allgather", asCFunction<allgatherEntry>(), METH_FASTCALL | METH_KEYWORDS,
     "allgather(tensor, name=None, process_set=global_process_set)\n\nEvery rank's `tensor` "
     "concatenated along dim 0 in a new tensor (ranks may differ in dim 0 only); its gradient "
     "is the average of the gradients over ranks, sliced to this rank's rows."},
};

// kEntries' parameters, in its order.
struct Params {
  const char* const* names;
  size_t count;
};
const Params kEntryParams[] = {{kAllreduceInplaceParams, std::size(kAllreduceInplaceParams)},
                               {kAllreduceParams, std::size(kAllreduceParams)},
                               {kBroadcastParams, std::size(kBroadcastParams)},
                               {kAllgatherParams, std::size(kAllgatherParams)}};

// 1 when the Python function `fn` takes exactly `params` (positional or keyword, no *args,
// **kwargs or keyword-only ones), 0 when not, -1 with a Python error.
int sameParams(PyObject* fn, const Params& params) {
  PyObject* code = PyObject_GetAttrString(fn, "__code__");
  if (code == nullptr) return -1;
  PyObject* argcount = PyObject_GetAttrString(code, "co_argcount");
  PyObject* kwonly = PyObject_GetAttrString(code, "co_kwonlyargcount");
  PyObject* flags = PyObject_GetAttrString(code, "co_flags");
  PyObject* names = PyObject_GetAttrString(code, "co_varnames");
  Py_DECREF(code);
  int same = -1;
  if (argcount != nullptr && kwonly != nullptr && flags != nullptr && names != nullptr &&
      PyTuple_Check(names)) {
    constexpr long kVarArgs = 0x04, kVarKeywords = 0x08;  // CO_VARARGS, CO_VARKEYWORDS
    same = PyLong_AsLong(argcount) == static_cast<long>(params.count) &&
           PyLong_AsLong(kwonly) == 0 && (PyLong_AsLong(flags) & (kVarArgs | kVarKeywords)) == 0;
    for (size_t i = 0; same == 1 && i < params.count; ++i) {
      same = PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(names, i), params.names[i]) == 0;
    }
    if (PyErr_Occurred()) same = -1;
  }
  Py_XDECREF(argcount);
  Py_XDECREF(kwonly);
  Py_XDECREF(flags);
  Py_XDECREF(names);
  return same;
}

// fast_entry(kind, fallback, global_set, config, module): the entry `kind` (a name in kEntries)
// standing for the Python function `fallback`, as a function of module `module`.
PyObject* fastEntry(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 5 || !PyUnicode_Check(args[0])) {
    PyErr_SetString(PyExc_TypeError, "fast_entry(kind, fallback, global_set, config, module)");
    return nullptr;
  }
  for (size_t i = 0; i < std::size(kEntries); ++i) {
    PyMethodDef& def = kEntries[i];
    if (PyUnicode_CompareWithASCIIString(args[0], def.ml_name) != 0) continue;
    const int same = sameParams(args[1], kEntryParams[i]);
    if (same <= 0) {
      if (same == 0) {
        PyErr_Format(PyExc_TypeError, "fast_entry: %R does not take the parameters of entry '%s'",
                     args[1], def.ml_name);
      }
      return nullptr;
    }
    PyObject* state = PyTuple_Pack(kStateSize, args[1], args[2], args[3]);
    if (state == nullptr) return nullptr;
    PyObject* fn = PyCFunction_NewEx(&def, state, args[4]);
    Py_DECREF(state);
    return fn;
  }
  PyErr_Format(PyExc_ValueError, "fast_entry: no entry named %R", args[0]);
  return nullptr;
}

PyMethodDef kFactory[] = {
    {"fast_entry", asCFunction<fastEntry>(), METH_FASTCALL,
     "fast_entry(kind, fallback, global_set, config, module): the C entry 'allreduce', "
     "'allreduce_', 'broadcast_' or 'allgather' standing for the Python function `fallback`."},
    {nullptr, nullptr, 0, nullptr}};

}  // namespace

void registerFastEntries(pybind11::module_& m) {
  if (PyModule_AddFunctions(m.ptr(), kFactory) != 0) throw pybind11::error_already_set();
}

}  // namespace perseus_py
