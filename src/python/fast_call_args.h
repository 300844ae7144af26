// What the extension's fast calls (fast_calls.cc, fast_outputs.cc) share: reading their
// positional FASTCALL arguments and turning a library status into the call's result.
// Contract: the GIL held; false or null means a Python error is set.
#pragma once

#include <Python.h>

#include "perseus/c_api.h"
#include "tensor_view.h"

namespace perseus_py {

// A tensor described by its address, dtype code and shape tuple (torch.Size is a tuple).
bool parseTensor(PyObject* address, PyObject* dtype, PyObject* shape, FlatTensor& out);

// The call's result: None, or the Python exception of a failed status.
PyObject* finish(perseus_status status, const char* what);

// Exactly `expected` positional arguments, else a TypeError naming `fn`.
bool exactCount(const char* fn, Py_ssize_t nargs, Py_ssize_t expected);

// The (name, op, prescale, postscale, process_set) after the tensor of allreduce_tensor and
// allreduce_copy.
struct TensorReduce {
  const char* name = nullptr;
  long op = 0;
  double prescale = 1.0;
  double postscale = 1.0;
  long process_set = 0;
};
bool parseTensorReduce(PyObject* const* args, TensorReduce& a);

// The in-place allreduce of `t` as torch.distributed orders a blocking collective, the GIL
// released around the engine calls: a CPU tensor's returns once done; a CUDA tensor's once the
// engine enqueued the GPU work and t.cuda_stream waits for it, with no host block for the GPU
// work itself (perseus_allreduce_on_stream, which a failed status comes from).
perseus_status allreduceOnItsStream(const char* name, FlatTensor& t, long op, double prescale,
                                    double postscale, long process_set);

// A METH_FASTCALL function as the PyCFunction a PyMethodDef stores; the cast through
// void(*)() is the documented way and keeps -Wcast-function-type quiet.
template <auto Fn>
PyCFunction asCFunction() {
  return reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(Fn));
}

}  // namespace perseus_py
