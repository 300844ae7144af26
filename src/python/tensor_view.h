// A framework's tensor object read in one C call, for the blocking fast calls (fast_calls.cc):
// its address, device, dtype and shape come from the DLPack C exchange API that its type
// carries (dlpack.h, DLPackExchangeAPI), where a Python caller reads six attributes, each
// through the framework's argument and error machinery. Only types a framework layer
// registered, exactly: a subclass may override what its tensors report.
//
// Contract: the GIL held throughout; the caller keeps the object alive while it uses the view.
#pragma once

#include <Python.h>

#include <cstdint>

#include "dlpack.h"
#include "perseus/c_api.h"

namespace perseus_py {

// A tensor by address, dtype and shape, owning its copy of the shape.
struct FlatTensor {
  int64_t shape[PERSEUS_MAX_NDIM];
  perseus_tensor t{};
  DLDataType dl_dtype{};  // viewDenseCpu() only: the framework's dtype, for newTensorLike()
};

// `data`, or for a tensor with no storage (frameworks give empty tensors none) a placeholder
// the core never reads.
void* dataOrPlaceholder(void* data);

// register_tensor_type(type, capsule): the tensors of exactly `type` are read through the
// exchange API in `capsule` (type.__dlpack_c_exchange_api__). Returns None; raises on a capsule
// that is not one, or a major version this extension does not read.
PyObject* registerTensorType(PyObject* self, PyObject* const* args, Py_ssize_t nargs);

// True, with `out` filled, when `obj` is a contiguous CPU tensor of a registered type and a
// dtype the core takes; false, with no Python error set, for anything else (the caller's
// Python path converts it or reports why not).
bool viewDenseCpu(PyObject* obj, FlatTensor& out);

// viewDenseCpu(), and also a contiguous CUDA tensor of a dtype the core takes, with its device
// and the framework's current stream on that device (the stream a torch.distributed collective
// is ordered on).
bool viewDenseOnCurrentStream(PyObject* obj, FlatTensor& out);

// Whether newTensorLike() can make tensors of `obj`'s type (its exchange API can take a managed
// tensor).
bool makesTensors(PyObject* obj);

// A new CPU tensor of `like`'s type and dtype (`view`: like's viewDenseCpu()) with `ndim`
// dimensions `shape`, in memory this extension allocates and the framework takes over through
// the exchange API's managed_tensor_to_py_object_no_sync (no Python call; the framework frees
// it with the tensor); its data address in *data. Null with a Python error when that fails;
// null with none when the type's API cannot take a managed tensor (the caller then allocates
// its own way).
PyObject* newTensorLike(PyObject* like, const FlatTensor& view, int32_t ndim, const int64_t* shape,
                        void** data);

}  // namespace perseus_py
