#include "tensor_view.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>

#include "dlpack.h"
#include "tensor_arg.h"

namespace perseus_py {
namespace {

struct Registered {
  PyTypeObject* type = nullptr;  // a strong reference, held for the process's life
  const DLPackExchangeAPI* api = nullptr;
};

// A framework layer registers its tensor type once; a few leave room for more than one.
std::array<Registered, 4> registered;

const DLPackExchangeAPI* apiOf(PyTypeObject* type) {
  for (const Registered& r : registered) {
    if (r.type == type) return r.api;
  }
  return nullptr;
}

}  // namespace

void* dataOrPlaceholder(void* data) {
  static char empty_storage alignas(16)[16];
  return data != nullptr ? data : empty_storage;
}

PyObject* registerTensorType(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2 || !PyType_Check(args[0])) {
    PyErr_SetString(PyExc_TypeError, "register_tensor_type(type, capsule)");
    return nullptr;
  }
  auto* api = static_cast<DLPackExchangeAPI*>(PyCapsule_GetPointer(args[1], kExchangeApi));
  if (api == nullptr) return nullptr;
  if (api->header.version.major != 1) {
    PyErr_Format(PyExc_ValueError, "DLPack exchange API %u.%u; this extension reads 1.x",
                 api->header.version.major, api->header.version.minor);
    return nullptr;
  }
  auto* type = reinterpret_cast<PyTypeObject*>(args[0]);
  if (api->dltensor_from_py_object_no_sync == nullptr || apiOf(type) != nullptr) Py_RETURN_NONE;
  auto free_slot = std::find_if(registered.begin(), registered.end(),
                                [](const Registered& r) { return r.type == nullptr; });
  if (free_slot == registered.end()) {
    PyErr_SetString(PyExc_RuntimeError, "too many tensor types registered");
    return nullptr;
  }
  Py_INCREF(type);
  *free_slot = {type, api};
  Py_RETURN_NONE;
}

namespace {

// `obj` through its type's exchange API: true, with `api` and `dl` set, for a contiguous tensor
// of a dtype the core takes; false, with no Python error set, for anything else.
bool viewDense(PyObject* obj, const DLPackExchangeAPI*& api, DLTensor& dl) {
  api = apiOf(Py_TYPE(obj));
  if (api == nullptr) return false;
  if (api->dltensor_from_py_object_no_sync(obj, &dl) != 0) {
    PyErr_Clear();  // the Python path meets the same tensor and reports what is wrong with it
    return false;
  }
  return perseusDtype(dl.dtype) >= 0 && dl.ndim >= 0 && dl.ndim <= PERSEUS_MAX_NDIM &&
         nonContiguousDim(dl) < 0;
}

void flatten(const DLTensor& dl, FlatTensor& out) {
  std::copy(dl.shape, dl.shape + dl.ndim, out.shape);
  out.t.data = dataOrPlaceholder(static_cast<char*>(dl.data) + dl.byte_offset);
  out.t.dtype = perseusDtype(dl.dtype);
  out.dl_dtype = dl.dtype;
  out.t.ndim = dl.ndim;
  out.t.shape = out.shape;
  out.t.device = PERSEUS_DEVICE_CPU;
  out.t.cuda_stream = nullptr;
}

}  // namespace

bool viewDenseCpu(PyObject* obj, FlatTensor& out) {
  const DLPackExchangeAPI* api = nullptr;
  DLTensor dl{};
  if (!viewDense(obj, api, dl) || dl.device.device_type != kDLCPU) return false;
  flatten(dl, out);
  return true;
}

bool viewDenseOnCurrentStream(PyObject* obj, FlatTensor& out) {
  const DLPackExchangeAPI* api = nullptr;
  DLTensor dl{};
  if (!viewDense(obj, api, dl)) return false;
  if (dl.device.device_type == kDLCPU) {
    flatten(dl, out);
    return true;
  }
  void* stream = nullptr;
  if (dl.device.device_type != kDLCUDA || api->current_work_stream == nullptr ||
      api->current_work_stream(kDLCUDA, dl.device.device_id, &stream) != 0) {
    PyErr_Clear();
    return false;
  }
  flatten(dl, out);
  out.t.device = dl.device.device_id;
  out.t.cuda_stream = stream;
  return true;
}

namespace {

// A new tensor's whole memory in one aligned allocation: the managed tensor, its shape and
// strides, then the data (kDataAlign-aligned, as torch's CPU allocator aligns). The framework
// wraps it as it wraps any DLPack producer's memory; its own allocator would add an allocation
// of its own and a second tensor object (torch: at::empty, then toDLPack) to free again.
constexpr size_t kDataAlign = 64;

struct HostBlock {
  DLManagedTensorVersioned managed;
  int64_t shape[PERSEUS_MAX_NDIM];
  int64_t strides[PERSEUS_MAX_NDIM];
};

constexpr size_t kHeaderBytes = (sizeof(HostBlock) + kDataAlign - 1) / kDataAlign * kDataAlign;

// The block's allocation is its manager_ctx.
void freeHostBlock(DLManagedTensorVersioned* self) { std::free(self->manager_ctx); }

// A managed CPU tensor of `dtype` and `shape` that frees its one block when the framework
// drops it; null when out of memory. malloc's, aligned within: a small aligned_alloc costs
// several times a malloc, which takes the small sizes from its per-thread cache.
DLManagedTensorVersioned* newHostBlock(DLDataType dtype, int32_t ndim, const int64_t* shape) {
  size_t bytes = (static_cast<size_t>(dtype.bits) * dtype.lanes + 7) / 8;
  for (int32_t i = 0; i < ndim; ++i) bytes *= static_cast<size_t>(shape[i]);
  const size_t total = kHeaderBytes + (bytes + kDataAlign - 1) / kDataAlign * kDataAlign;
  void* raw = std::malloc(total + kDataAlign - 1);
  if (raw == nullptr) return nullptr;
  const auto at = (reinterpret_cast<uintptr_t>(raw) + kDataAlign - 1) & ~(kDataAlign - 1);
  auto* block = reinterpret_cast<HostBlock*>(at);
  int64_t stride = 1;
  for (int32_t i = ndim - 1; i >= 0; --i) {
    block->shape[i] = shape[i];
    block->strides[i] = stride;
    stride *= std::max<int64_t>(shape[i], 1);
  }
  DLManagedTensorVersioned& m = block->managed;
  m.version = {1, 0};
  m.manager_ctx = raw;
  m.deleter = freeHostBlock;
  m.flags = 0;
  m.dl_tensor.data = reinterpret_cast<char*>(block) + kHeaderBytes;
  m.dl_tensor.device = {kDLCPU, 0};
  m.dl_tensor.ndim = ndim;
  m.dl_tensor.dtype = dtype;
  m.dl_tensor.shape = block->shape;
  m.dl_tensor.strides = block->strides;
  m.dl_tensor.byte_offset = 0;
  return &block->managed;
}

}  // namespace

bool makesTensors(PyObject* obj) {
  const DLPackExchangeAPI* api = apiOf(Py_TYPE(obj));
  return api != nullptr && api->managed_tensor_to_py_object_no_sync != nullptr;
}

PyObject* newTensorLike(PyObject* like, const FlatTensor& view, int32_t ndim, const int64_t* shape,
                        void** data) {
  const DLPackExchangeAPI* api = apiOf(Py_TYPE(like));
  if (api == nullptr || api->managed_tensor_to_py_object_no_sync == nullptr) return nullptr;
  DLManagedTensorVersioned* made = newHostBlock(view.dl_dtype, ndim, shape);
  if (made == nullptr) return PyErr_NoMemory();
  *data = made->dl_tensor.data;
  void* tensor = nullptr;
  if (api->managed_tensor_to_py_object_no_sync(made, &tensor) != 0) return nullptr;
  return static_cast<PyObject*>(tensor);
}

}  // namespace perseus_py
