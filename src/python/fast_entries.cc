// A framework layer's blocking collectives as C functions: hvd.allreduce, hvd.allreduce_,
// hvd.broadcast_ and hvd.allgather are these, so that a call a user makes reaches the tensor
// fast calls (fast_calls.h) with no Python frame. The frame, its keyword matching and its global
// lookups were about a fifth of a small allreduce_ (bench/small_ops/README.md). Each entry binds
// its arguments as the Python function it stands for would, takes the fast call when the Python
// function would (a call of the global set, the same op table; no name is the kind's
// blocking name, perseus.common.names), and otherwise calls that
// function with the arguments unchanged: it raises what Python raises for a wrong call, and
// takes every other path (another process set, a CUDA tensor, a gradient).
#include <Python.h>
#include <pybind11/pybind11.h>
#include <structmember.h>

#include <array>
#include <iterator>

#include "call_site.h"
#include "fast_call_args.h"
#include "fast_calls.h"

// Python 3.8 spells these with an underscore, and its PyType_FromSpec does not read
// __vectorcalloffset__: there the extension has no fast_entry and the framework layers keep
// their Python functions.
#if PY_VERSION_HEX < 0x03090000
#define Py_TPFLAGS_HAVE_VECTORCALL _Py_TPFLAGS_HAVE_VECTORCALL
#define PyObject_Vectorcall _PyObject_Vectorcall
#endif

namespace perseus_py {
namespace {

// An entry: a callable object whose vectorcall is its kind's function below, with what it
// stands for. Not a builtin function: a builtin's signature comes from a text signature, which
// cannot spell the Python function's defaults (process_set=global_process_set). This one has a
// __dict__ with __wrapped__ (the Python function), so inspect.signature and help() show the
// Python function's signature, and its __name__, __qualname__, __module__ and __doc__.
struct Entry {
  PyObject_HEAD vectorcallfunc call;
  PyObject* fallback;    // the Python function it stands for
  PyObject* global_set;  // the global process set
  PyObject* config;      // what the entry's kind says it is
  PyObject* unnamed;     // the name of a call with name=None (names.blocking_name): a str, or
                         // for the allreduce entries a dict by the op's core code
  PyObject* dict;
};

Entry* entryOf(PyObject* self) { return reinterpret_cast<Entry*>(self); }

PyObject* fallback(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  return PyObject_Vectorcall(entryOf(self)->fallback, args, static_cast<size_t>(nargs), kwnames);
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
  return process_set == nullptr || process_set == entryOf(self)->global_set;
}

// The call's name: a str as given, the entry's unnamed name for None or no name (by `op`, the
// op's core code, for the allreduce entries), else null (the fallback makes one of it).
PyObject* nameOf(PyObject* self, PyObject* name, PyObject* op = nullptr) {
  if (name != nullptr && name != Py_None) return PyUnicode_CheckExact(name) ? name : nullptr;
  PyObject* unnamed = entryOf(self)->unnamed;
  if (!PyDict_CheckExact(unnamed)) return unnamed;
  PyObject* by_op = op != nullptr ? PyDict_GetItemWithError(unnamed, op) : nullptr;
  if (by_op == nullptr) PyErr_Clear();
  return by_op;
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
PyObject* allreduceEntry(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  static const auto names = interned(kAllreduceInplaceParams);
  static PyObject* const one = PyFloat_FromDouble(1.0);
  static PyObject* const zero = PyLong_FromLong(0);
  PyObject* a[7] = {};
  if (!bind(names, args, nargs, kwnames, a) || (a[1] != nullptr && a[1] != Py_None) ||
      !globalSet(self, a[6])) {
    return fallback(self, args, nargs, kwnames);
  }
  // The op table's entry, as _DIRECT_OPS.get(op): absent (or unhashable) for ops it lacks.
  PyObject* op = PyDict_GetItemWithError(entryOf(self)->config, a[3] == nullptr ? Py_None : a[3]);
  if (op == nullptr || (a[2] = nameOf(self, a[2], op)) == nullptr) {
    PyErr_Clear();
    return fallback(self, args, nargs, kwnames);
  }
  PyObject* call[6] = {a[0], a[2], op, a[4] ? a[4] : one, a[5] ? a[5] : one, zero};
  return orFallback([&] { return allreduceTensor(nullptr, call, 6); }, self, args, nargs, kwnames);
}

// allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
//           prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set); config:
// (op table, Compression.none, the most bytes copied)
PyObject* allreduceCopyEntry(PyObject* self, PyObject* const* args, size_t nargsf,
                             PyObject* kwnames) {
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  static const auto names = interned(kAllreduceParams);
  static PyObject* const one = PyFloat_FromDouble(1.0);
  static PyObject* const zero = PyLong_FromLong(0);
  PyObject* config = entryOf(self)->config;
  PyObject* a[8] = {};
  if (!bind(names, args, nargs, kwnames, a) || (a[1] != nullptr && a[1] != Py_None) ||
      (a[3] != nullptr && a[3] != PyTuple_GET_ITEM(config, 1)) || !globalSet(self, a[7])) {
    return fallback(self, args, nargs, kwnames);
  }
  PyObject* op =
      PyDict_GetItemWithError(PyTuple_GET_ITEM(config, 0), a[4] == nullptr ? Py_None : a[4]);
  if (op == nullptr || (a[2] = nameOf(self, a[2], op)) == nullptr) {
    PyErr_Clear();
    return fallback(self, args, nargs, kwnames);
  }
  PyObject* call[7] = {
      a[0], a[2], op, a[5] ? a[5] : one, a[6] ? a[6] : one, zero, PyTuple_GET_ITEM(config, 2)};
  return orFallback([&] { return allreduceCopy(nullptr, call, 7); }, self, args, nargs, kwnames);
}

// broadcast_(tensor, root_rank, name=None, process_set=global_process_set)
PyObject* broadcastEntry(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  static const auto names = interned(kBroadcastParams);
  static PyObject* const zero = PyLong_FromLong(0);
  PyObject* a[4] = {};
  if (!bind(names, args, nargs, kwnames, a) || a[1] == nullptr || !PyLong_CheckExact(a[1]) ||
      (a[2] = nameOf(self, a[2])) == nullptr || !globalSet(self, a[3])) {
    return fallback(self, args, nargs, kwnames);
  }
  PyObject* call[4] = {a[0], a[2], a[1], zero};
  return orFallback([&] { return broadcastTensor(nullptr, call, 4); }, self, args, nargs, kwnames);
}

// allgather(tensor, name=None, process_set=global_process_set); config: (max_bytes, allocate)
PyObject* allgatherEntry(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  static const auto names = interned(kAllgatherParams);
  static PyObject* const zero = PyLong_FromLong(0);
  PyObject* a[3] = {};
  if (!bind(names, args, nargs, kwnames, a) || (a[1] = nameOf(self, a[1])) == nullptr ||
      !globalSet(self, a[2])) {
    return fallback(self, args, nargs, kwnames);
  }
  PyObject* config = entryOf(self)->config;
  PyObject* call[5] = {a[0], a[1], zero, PyTuple_GET_ITEM(config, 0), PyTuple_GET_ITEM(config, 1)};
  return orFallback([&] { return allgatherTensor(nullptr, call, 5); }, self, args, nargs, kwnames);
}

// Each entry's kind: its name, function, its Python function's parameters and its doc.
struct Kind {
  const char* name;
  vectorcallfunc call;
  const char* const* params;
  size_t count;
  const char* doc;
};
const Kind kKinds[] = {
    {"allreduce_", allreduceEntry, kAllreduceInplaceParams, std::size(kAllreduceInplaceParams),
     "In-place allreduce of `tensor` over the set (op=None means Average); returns `tensor` when "
     "done."},
    {"allreduce", allreduceCopyEntry, kAllreduceParams, std::size(kAllreduceParams),
     "Reduces `tensor` over the set (op=None: Average) and returns a new tensor; its gradient is "
     "the allreduce of the gradient with the same op and factors."},
    {"broadcast_", broadcastEntry, kBroadcastParams, std::size(kBroadcastParams),
     "In-place broadcast of root_rank's `tensor`; returns `tensor` when done."},
    {"allgather", allgatherEntry, kAllgatherParams, std::size(kAllgatherParams),
     "Every rank's `tensor` concatenated along dim 0 in a new tensor (ranks may differ in dim 0 "
     "only); its gradient is the average of the gradients over ranks, sliced to this rank's "
     "rows."},
};

// 1 when the Python function `fn` takes exactly `params` (positional or keyword, no *args,
// **kwargs or keyword-only ones), 0 when not, -1 with a Python error.
int sameParams(PyObject* fn, const Kind& params) {
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
      same = PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(names, i), params.params[i]) == 0;
    }
    if (PyErr_Occurred()) same = -1;
  }
  Py_XDECREF(argcount);
  Py_XDECREF(kwonly);
  Py_XDECREF(flags);
  Py_XDECREF(names);
  return same;
}

int traverseEntry(PyObject* self, visitproc visit, void* arg) {
  Entry* e = entryOf(self);
  Py_VISIT(e->fallback);
  Py_VISIT(e->global_set);
  Py_VISIT(e->config);
  Py_VISIT(e->unnamed);
  Py_VISIT(e->dict);
  Py_VISIT(Py_TYPE(self));  // a heap type's instances own a reference to it
  return 0;
}

int clearEntry(PyObject* self) {
  Entry* e = entryOf(self);
  Py_CLEAR(e->fallback);
  Py_CLEAR(e->global_set);
  Py_CLEAR(e->config);
  Py_CLEAR(e->unnamed);
  Py_CLEAR(e->dict);
  return 0;
}

void deallocEntry(PyObject* self) {
  PyTypeObject* type = Py_TYPE(self);
  PyObject_GC_UnTrack(self);
  clearEntry(self);
  type->tp_free(self);
  Py_DECREF(type);
}

// As a class attribute it stays itself, as a builtin function does (no bound method).
PyObject* getEntry(PyObject* self, PyObject*, PyObject*) {
  Py_INCREF(self);
  return self;
}

PyObject* reprEntry(PyObject* self) {
  PyObject* name = PyDict_GetItemString(entryOf(self)->dict, "__qualname__");
  return PyUnicode_FromFormat("<perseus function %S>", name != nullptr ? name : Py_None);
}

// Pickled, and copied, as a function is: by its module and name (a string __reduce__).
PyObject* reduceEntry(PyObject* self, PyObject*) {
  PyObject* name = PyDict_GetItemString(entryOf(self)->dict, "__qualname__");
  if (name == nullptr) {
    PyErr_SetString(PyExc_TypeError, "a fast entry without a __qualname__");
    return nullptr;
  }
  Py_INCREF(name);
  return name;
}

PyMethodDef kEntryMethods[] = {
    {"__reduce__", reduceEntry, METH_NOARGS, "Pickled by module and name, as a function is."},
    {nullptr, nullptr, 0, nullptr}};

PyMemberDef kEntryMembers[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(Entry, call), READONLY, nullptr},
    {"__dictoffset__", T_PYSSIZET, offsetof(Entry, dict), READONLY, nullptr},
    {nullptr, 0, 0, 0, nullptr}};

PyType_Slot kEntrySlots[] = {{Py_tp_call, reinterpret_cast<void*>(PyVectorcall_Call)},
                             {Py_tp_descr_get, reinterpret_cast<void*>(getEntry)},
                             {Py_tp_repr, reinterpret_cast<void*>(reprEntry)},
                             {Py_tp_traverse, reinterpret_cast<void*>(traverseEntry)},
                             {Py_tp_clear, reinterpret_cast<void*>(clearEntry)},
                             {Py_tp_dealloc, reinterpret_cast<void*>(deallocEntry)},
                             {Py_tp_members, kEntryMembers},
                             {Py_tp_methods, kEntryMethods},
                             {0, nullptr}};

// Only fast_entry() makes entries, and nobody changes their type.
#if PY_VERSION_HEX >= 0x030A0000
constexpr unsigned long kSealed = Py_TPFLAGS_DISALLOW_INSTANTIATION | Py_TPFLAGS_IMMUTABLETYPE;
#else
constexpr unsigned long kSealed = 0;
#endif

PyType_Spec kEntrySpec = {
    "perseus._core.FastEntry", sizeof(Entry), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL | kSealed, kEntrySlots};

// The entry's attributes: a function's, with __wrapped__ the Python function (inspect.unwrap).
bool describe(Entry* e, const Kind& kind, PyObject* module) {
  PyObject* name = PyUnicode_FromString(kind.name);
  PyObject* doc = PyUnicode_FromString(kind.doc);
  const bool ok = name != nullptr && doc != nullptr &&
                  PyDict_SetItemString(e->dict, "__name__", name) == 0 &&
                  PyDict_SetItemString(e->dict, "__qualname__", name) == 0 &&
                  PyDict_SetItemString(e->dict, "__module__", module) == 0 &&
                  PyDict_SetItemString(e->dict, "__doc__", doc) == 0 &&
                  PyDict_SetItemString(e->dict, "__wrapped__", e->fallback) == 0;
  Py_XDECREF(name);
  Py_XDECREF(doc);
  return ok;
}

// An entry of `kind` standing for `fallback`.
PyObject* newEntry(PyTypeObject* type, const Kind& kind, PyObject* const* args) {
  Entry* e = PyObject_GC_New(Entry, type);
  if (e == nullptr) return nullptr;
  e->call = kind.call;
  Py_INCREF(args[1]);
  Py_INCREF(args[2]);
  Py_INCREF(args[3]);
  Py_INCREF(args[5]);
  e->fallback = args[1];
  e->global_set = args[2];
  e->config = args[3];
  e->unnamed = args[5];
  e->dict = PyDict_New();
  PyObject_GC_Track(e);
  PyObject* self = reinterpret_cast<PyObject*>(e);
  if (e->dict == nullptr || !describe(e, kind, args[4])) {
    Py_DECREF(self);
    return nullptr;
  }
  return self;
}

// fast_entry(kind, fallback, global_set, config, module, unnamed): the entry `kind` (a name
// in kKinds) standing for the Python function `fallback`, as a function of module `module`;
// a call with no name takes the str `unnamed`, or the allreduce entries unnamed[op's code].
PyObject* fastEntry(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 6 || !PyUnicode_Check(args[0]) ||
      !(PyUnicode_CheckExact(args[5]) || PyDict_CheckExact(args[5]))) {
    PyErr_SetString(PyExc_TypeError,
                    "fast_entry(kind, fallback, global_set, config, module, unnamed: str or dict)");
    return nullptr;
  }
  static PyObject* const type = PyType_FromSpec(&kEntrySpec);
  if (type == nullptr) return nullptr;
  for (const Kind& kind : kKinds) {
    if (PyUnicode_CompareWithASCIIString(args[0], kind.name) != 0) continue;
    const int same = sameParams(args[1], kind);
    if (same <= 0) {
      if (same == 0) {
        PyErr_Format(PyExc_TypeError, "fast_entry: %R does not take the parameters of entry '%s'",
                     args[1], kind.name);
      }
      return nullptr;
    }
    return newEntry(reinterpret_cast<PyTypeObject*>(type), kind, args);
  }
  PyErr_Format(PyExc_ValueError, "fast_entry: no entry named %R", args[0]);
  return nullptr;
}

PyMethodDef kFactory[] = {
    {"fast_entry", asCFunction<fastEntry>(), METH_FASTCALL,
     "fast_entry(kind, fallback, global_set, config, module, unnamed): the C entry "
     "'allreduce', 'allreduce_', 'broadcast_' or 'allgather' standing for the Python function "
     "`fallback`; a call with no name takes the name `unnamed`."},
    {nullptr, nullptr, 0, nullptr}};

}  // namespace

void registerFastEntries(pybind11::module_& m) {
#if PY_VERSION_HEX >= 0x03090000
  if (PyModule_AddFunctions(m.ptr(), kFactory) != 0) throw pybind11::error_already_set();
#else
  (void)m;
#endif
}

}  // namespace perseus_py
