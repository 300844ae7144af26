// One tensor argument of a collective: a DLPack capsule (CPU or CUDA) or an object with the
// buffer protocol (numpy), viewed as a perseus_tensor without copying.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <vector>

#include "dlpack.h"
#include "perseus/c_api.h"

namespace perseus_py {

// Ownership: a DLPack capsule is consumed (renamed "used_dltensor") and its deleter runs when
// the TensorArg dies; a buffer view is released then. That keeps the memory alive until the
// handle that holds this argument completes. Construct and destroy with the GIL held.
class TensorArg {
 public:
  // `role` ("input", "output", ...) and `name` (the collective's) only feed error messages.
  TensorArg(pybind11::handle obj, bool writable, const char* role, const std::string& name);
  ~TensorArg();
  TensorArg(const TensorArg&) = delete;
  TensorArg& operator=(const TensorArg&) = delete;

  const perseus_tensor& tensor() const { return tensor_; }
  // CUDA tensors: the stream that produced the data (0: the legacy default stream).
  void setCudaStream(void* stream) { tensor_.cuda_stream = stream; }
  bool isCuda() const { return tensor_.device != PERSEUS_DEVICE_CPU; }

 private:
  void fromDlTensor(const DLTensor& t, const std::string& where);
  void fromBuffer(pybind11::handle obj, bool writable, const std::string& where);

  std::vector<int64_t> shape_;
  perseus_tensor tensor_{};
  DLManagedTensor* managed_ = nullptr;
  DLManagedTensorVersioned* versioned_ = nullptr;
  Py_buffer view_{};
  bool has_view_ = false;
};

// The perseus_dtype of a DLPack dtype, or -1 when the core has none.
int32_t perseusDtype(const DLDataType& t);
// The dimension whose stride breaks row-major contiguity, or -1 when the tensor is contiguous.
int nonContiguousDim(const DLTensor& t);

// "float32", "bfloat16", ... for messages and for numpy output dtypes.
const char* dtypeName(int32_t dtype);
int64_t dtypeSize(int32_t dtype);

}  // namespace perseus_py
