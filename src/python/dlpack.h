// The DLPack ABI (https://github.com/dmlc/dlpack, v0.8 and the v1.0 versioned tensor), declared
// here because the extension must not depend on any framework's headers. Only the layout
// matters; these structs are frozen by the DLPack spec.
#pragma once

#include <cstdint>

extern "C" {

enum DLDeviceType : int32_t {
  kDLCPU = 1,
  kDLCUDA = 2,
  kDLCUDAHost = 3,
  kDLCUDAManaged = 13,
};

struct DLDevice {
  int32_t device_type;  // DLDeviceType
  int32_t device_id;
};

enum DLDataTypeCode : uint8_t {
  kDLInt = 0,
  kDLUInt = 1,
  kDLFloat = 2,
  kDLOpaqueHandle = 3,
  kDLBfloat = 4,
  kDLComplex = 5,
  kDLBool = 6,
};

struct DLDataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};

struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;  // NULL: compact row-major
  uint64_t byte_offset;
};

struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};

struct DLPackVersion {
  uint32_t major;
  uint32_t minor;
};

struct DLManagedTensorVersioned {
  DLPackVersion version;
  void* manager_ctx;
  void (*deleter)(DLManagedTensorVersioned* self);
  uint64_t flags;
  DLTensor dl_tensor;
};

// The DLPack C exchange API (DLPack 1.2+): a framework's tensor type carries, as the capsule
// `type.__dlpack_c_exchange_api__` named kExchangeApi, a table of C functions; one of them views
// a tensor object as a DLTensor without building a capsule. Only the header's layout is stable
// across versions; a consumer checks header.version.major before it reads the rest.
struct DLPackExchangeAPIHeader {
  DLPackVersion version;
  DLPackExchangeAPIHeader* prev_api;
};

struct DLPackExchangeAPI {
  DLPackExchangeAPIHeader header;
  // A new tensor of the prototype's dtype, ndim, shape and device in *out; 0, or -1 after
  // calling set_error(error_ctx, kind, message).
  int (*managed_tensor_allocator)(DLTensor* prototype, DLManagedTensorVersioned** out,
                                  void* error_ctx,
                                  void (*set_error)(void* error_ctx, const char* kind,
                                                    const char* message));
  void* managed_tensor_from_py_object_no_sync;
  // The framework's tensor object that takes over `tensor`; 0, or -1 with a Python exception.
  int (*managed_tensor_to_py_object_no_sync)(DLManagedTensorVersioned* tensor, void** out);
  // Fills `out` (shape and strides stay valid while the object is unchanged and the GIL held);
  // 0, or -1 with a Python exception set. May be NULL.
  int (*dltensor_from_py_object_no_sync)(void* py_object, DLTensor* out);
  // The framework's current work stream of a device (torch: its current CUDA stream) in *out;
  // 0, or -1 with a Python exception set. May be NULL.
  int (*current_work_stream)(int32_t device_type, int32_t device_id, void** out);
};

}  // extern "C"

namespace perseus_py {
// Capsule names fixed by the DLPack Python protocol: a producer names a fresh capsule
// kDltensor; the consumer renames it kUsedDltensor once it took ownership.
constexpr const char* kDltensor = "dltensor";
constexpr const char* kUsedDltensor = "used_dltensor";
constexpr const char* kDltensorVersioned = "dltensor_versioned";
constexpr const char* kUsedDltensorVersioned = "used_dltensor_versioned";
constexpr const char* kExchangeApi = "dlpack_exchange_api";
}  // namespace perseus_py
