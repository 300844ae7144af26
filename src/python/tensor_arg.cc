#include "tensor_arg.h"

#include <cstring>

#include "errors.h"
#include "tensor_view.h"

namespace py = pybind11;

namespace perseus_py {
namespace {

std::string dlDtypeName(const DLDataType& t) {
  static const char* kCodes[] = {"int", "uint", "float", "opaque", "bfloat", "complex", "bool"};
  std::string base = t.code < 7 ? kCodes[t.code] : "code" + std::to_string(t.code);
  std::string s = base + std::to_string(t.bits);
  if (t.lanes != 1) s += "x" + std::to_string(t.lanes);
  return s;
}

int32_t mapDlDtype(const DLDataType& t, const std::string& where) {
  const int32_t dtype = perseusDtype(t);
  if (dtype >= 0) return dtype;
  throw StatusError(PERSEUS_ERR_UNSUPPORTED,
                    where + ": dtype " + dlDtypeName(t) +
                        " is not supported; use uint8, int8, int32, int64, float16, bfloat16, "
                        "float32, float64 or bool");
}

int32_t mapDevice(const DLDevice& d, const std::string& where) {
  switch (d.device_type) {
    case kDLCPU:
    case kDLCUDAHost:  // pinned host memory is plain CPU memory to the engine
      return PERSEUS_DEVICE_CPU;
    case kDLCUDA:
    case kDLCUDAManaged:
      return d.device_id;
    default:
      throw StatusError(PERSEUS_ERR_UNSUPPORTED,
                        where + ": DLPack device type " + std::to_string(d.device_type) +
                            " is not supported; only CPU and CUDA tensors can be communicated");
  }
}

// Buffer-protocol format character (struct module syntax) -> perseus dtype.
int32_t mapFormat(const char* format, Py_ssize_t itemsize, const std::string& where) {
  std::string f = format ? format : "B";
  if (!f.empty() && (f[0] == '@' || f[0] == '=' || f[0] == '<')) f = f.substr(1);
  if (f.size() == 1) {
    switch (f[0]) {
      case 'B':
        return PERSEUS_UINT8;
      case 'b':
        return PERSEUS_INT8;
      case '?':
        return PERSEUS_BOOL;
      case 'e':
        return PERSEUS_FLOAT16;
      case 'f':
        return PERSEUS_FLOAT32;
      case 'd':
        return PERSEUS_FLOAT64;
      case 'i':
      case 'l':
      case 'q':
        if (itemsize == 4) return PERSEUS_INT32;
        if (itemsize == 8) return PERSEUS_INT64;
        break;
      default:
        break;
    }
  }
  throw StatusError(PERSEUS_ERR_UNSUPPORTED,
                    where + ": buffer format '" + f + "' (itemsize " + std::to_string(itemsize) +
                        ") is not supported; use uint8, int8, int32, int64, float16, "
                        "float32, float64 or bool arrays");
}

}  // namespace

int32_t perseusDtype(const DLDataType& t) {
  if (t.lanes != 1) return -1;
  switch (t.code) {
    case kDLUInt:
      if (t.bits == 8) return PERSEUS_UINT8;
      break;
    case kDLInt:
      if (t.bits == 8) return PERSEUS_INT8;
      if (t.bits == 32) return PERSEUS_INT32;
      if (t.bits == 64) return PERSEUS_INT64;
      break;
    case kDLFloat:
      if (t.bits == 16) return PERSEUS_FLOAT16;
      if (t.bits == 32) return PERSEUS_FLOAT32;
      if (t.bits == 64) return PERSEUS_FLOAT64;
      break;
    case kDLBfloat:
      if (t.bits == 16) return PERSEUS_BFLOAT16;
      break;
    case kDLBool:
      if (t.bits == 8) return PERSEUS_BOOL;
      break;
    default:
      break;
  }
  return -1;
}

int nonContiguousDim(const DLTensor& t) {
  if (t.strides == nullptr) return -1;
  // Dimensions of size 1 may carry any stride; an empty tensor is trivially contiguous.
  for (int i = 0; i < t.ndim; ++i) {
    if (t.shape[i] == 0) return -1;
  }
  int64_t expected = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    if (t.shape[i] != 1 && t.strides[i] != expected) return i;
    expected *= t.shape[i];
  }
  return -1;
}

const char* dtypeName(int32_t dtype) {
  switch (dtype) {
    case PERSEUS_UINT8:
      return "uint8";
    case PERSEUS_INT8:
      return "int8";
    case PERSEUS_INT32:
      return "int32";
    case PERSEUS_INT64:
      return "int64";
    case PERSEUS_FLOAT16:
      return "float16";
    case PERSEUS_BFLOAT16:
      return "bfloat16";
    case PERSEUS_FLOAT32:
      return "float32";
    case PERSEUS_FLOAT64:
      return "float64";
    case PERSEUS_BOOL:
      return "bool";
    default:
      return "unknown";
  }
}

int64_t dtypeSize(int32_t dtype) {
  switch (dtype) {
    case PERSEUS_UINT8:
    case PERSEUS_INT8:
    case PERSEUS_BOOL:
      return 1;
    case PERSEUS_FLOAT16:
    case PERSEUS_BFLOAT16:
      return 2;
    case PERSEUS_INT32:
    case PERSEUS_FLOAT32:
      return 4;
    case PERSEUS_INT64:
    case PERSEUS_FLOAT64:
      return 8;
    default:
      return 0;
  }
}

TensorArg::TensorArg(py::handle obj, bool writable, const char* role, const std::string& name) {
  const std::string where = "tensor '" + name + "' (" + role + ")";
  PyObject* o = obj.ptr();
  if (PyCapsule_CheckExact(o)) {
    if (PyCapsule_IsValid(o, kDltensor)) {
      managed_ = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(o, kDltensor));
      fromDlTensor(managed_->dl_tensor, where);
      PyCapsule_SetName(o, kUsedDltensor);
      return;
    }
    if (PyCapsule_IsValid(o, kDltensorVersioned)) {
      versioned_ =
          static_cast<DLManagedTensorVersioned*>(PyCapsule_GetPointer(o, kDltensorVersioned));
      fromDlTensor(versioned_->dl_tensor, where);
      PyCapsule_SetName(o, kUsedDltensorVersioned);
      return;
    }
    invalidArgument(where +
                    ": the capsule is not an unused DLPack tensor (a DLPack capsule "
                    "can be passed to one collective only)");
  }
  fromBuffer(obj, writable, where);
}

TensorArg::~TensorArg() {
  if (managed_ != nullptr && managed_->deleter != nullptr) managed_->deleter(managed_);
  if (versioned_ != nullptr && versioned_->deleter != nullptr) versioned_->deleter(versioned_);
  if (has_view_) PyBuffer_Release(&view_);
}

void TensorArg::fromDlTensor(const DLTensor& t, const std::string& where) {
  tensor_.dtype = mapDlDtype(t.dtype, where);
  tensor_.device = mapDevice(t.device, where);
  if (t.ndim < 0 || t.ndim > PERSEUS_MAX_NDIM) {
    invalidArgument(where + ": " + std::to_string(t.ndim) + " dimensions; at most " +
                    std::to_string(PERSEUS_MAX_NDIM) + " are supported");
  }
  shape_.assign(t.shape, t.shape + t.ndim);
  const int dim = nonContiguousDim(t);
  if (dim >= 0) {
    invalidArgument(where + ": the tensor is not contiguous (stride " +
                    std::to_string(t.strides[dim]) + " in dimension " + std::to_string(dim) +
                    "); call .contiguous() before passing it");
  }
  tensor_.data = dataOrPlaceholder(static_cast<char*>(t.data) + t.byte_offset);
  tensor_.ndim = t.ndim;
  tensor_.shape = shape_.data();
  tensor_.cuda_stream = nullptr;
}

void TensorArg::fromBuffer(py::handle obj, bool writable, const std::string& where) {
  int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
  if (PyObject_GetBuffer(obj.ptr(), &view_, flags) != 0) {
    py::error_already_set err;
    invalidArgument(where + ": expected a DLPack capsule or a C-contiguous" +
                    std::string(writable ? ", writable" : "") + " buffer (numpy array); " +
                    err.what());
  }
  try {
    tensor_.dtype = mapFormat(view_.format, view_.itemsize, where);
    if (view_.ndim > PERSEUS_MAX_NDIM) {
      invalidArgument(where + ": too many dimensions (" + std::to_string(view_.ndim) + ")");
    }
  } catch (...) {
    PyBuffer_Release(&view_);  // the destructor does not run for a throwing constructor
    throw;
  }
  has_view_ = true;
  if (view_.shape != nullptr) {
    shape_.assign(view_.shape, view_.shape + view_.ndim);
  } else {
    shape_.assign(1, view_.len / view_.itemsize);
  }
  tensor_.data = view_.buf;
  tensor_.ndim = static_cast<int32_t>(shape_.size());
  tensor_.shape = shape_.data();
  tensor_.device = PERSEUS_DEVICE_CPU;
  tensor_.cuda_stream = nullptr;
}

}  // namespace perseus_py
