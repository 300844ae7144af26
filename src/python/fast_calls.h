// The tensor forms of the blocking fast calls (fast_calls.cc), which the framework entries
// (fast_entries.cc) call directly. Each takes its Python arguments as a FASTCALL array, returns
// the tensor, NotImplemented having done nothing for a tensor it cannot view, or null with a
// Python error. Contract: the GIL held.
#pragma once

#include <Python.h>

namespace perseus_py {

// (tensor, name, op, prescale, postscale, process_set)
PyObject* allreduceTensor(PyObject* self, PyObject* const* args, Py_ssize_t nargs);
// (tensor, name, root, process_set)
PyObject* broadcastTensor(PyObject* self, PyObject* const* args, Py_ssize_t nargs);
// (tensor, name, process_set, max_bytes, allocate): the gathered tensor
PyObject* allgatherTensor(PyObject* self, PyObject* const* args, Py_ssize_t nargs);
// (tensor, name, op, prescale, postscale, process_set, max_bytes): a new, reduced tensor
PyObject* allreduceCopy(PyObject* self, PyObject* const* args, Py_ssize_t nargs);

}  // namespace perseus_py
