// Small CUDA runtime helpers of the GPU data plane: error checks that throw the core's
// exceptions, a device guard, and the one place that asks whether a driver and a device exist.
#pragma once

#include <cuda_runtime.h>

#include <string>

namespace perseus::nccl {

// Throws InternalError naming `what` and the CUDA error when err != cudaSuccess.
void checkCuda(cudaError_t err, const char* what);

// Throws UnsupportedError, with what to do, when `device` cannot be used: no driver, no
// device, or an ordinal past the device count. Cheap after the first call per process.
void requireDevice(int device);

// The number of CUDA devices this process sees (> 0); throws as requireDevice() where there
// is no driver or device.
int visibleDeviceCount();

// "cuda_archs=... cuda_runtime=13000 cuda_driver=13000 gpus=1 gpu0=NVIDIA_H200:sm_90" (names
// with '_' for spaces), or "... gpus=0 cuda_error=<name>" where no driver or GPU answers.
std::string cudaRuntimeReport();

// Makes `device` current for the scope and restores the caller's device afterwards, so that a
// framework thread's current device is never changed behind its back.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
  bool changed_ = false;
};

}  // namespace perseus::nccl
