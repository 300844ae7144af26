#include "backends/nccl/cuda_util.h"

#include <mutex>
#include <sstream>

#include "common/status.h"
#include "kernels/cuda/cuda_error.h"

namespace perseus::nccl {

void checkCuda(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  (void)cudaGetLastError();  // clear the sticky-free error so the next call starts clean
  throw InternalError(kernels::cuda::cudaErrorText(err, what));
}

namespace {
struct DeviceCount {
  cudaError_t status = cudaSuccess;
  int count = 0;
};

const DeviceCount& deviceCount() {
  // cudaGetDeviceCount is the first call that touches the driver. Its answer cannot change
  // while the process runs, so ask once.
  static std::once_flag once;
  static DeviceCount dc;
  std::call_once(once, [] {
    dc.status = cudaGetDeviceCount(&dc.count);
    if (dc.status != cudaSuccess) (void)cudaGetLastError();
  });
  return dc;
}
}  // namespace

int visibleDeviceCount() {
  requireDevice(0);
  return deviceCount().count;
}

void requireDevice(int device) {
  const cudaError_t status = deviceCount().status;
  const int count = deviceCount().count;
  if (status != cudaSuccess) {
    throw UnsupportedError(PERSEUS_STR(
        "a CUDA tensor was given (device "
        << device << ") but CUDA cannot be used here: " << cudaGetErrorName(status) << " ("
        << cudaGetErrorString(status)
        << "). Install the NVIDIA driver / run on a GPU machine, or pass CPU tensors."));
  }
  if (device < 0 || device >= count) {
    throw UnsupportedError(PERSEUS_STR("a tensor is on CUDA device "
                                       << device << " but this process sees " << count
                                       << " device(s) (check CUDA_VISIBLE_DEVICES)."));
  }
}

std::string cudaRuntimeReport() {
  std::ostringstream os;
  int runtime = 0, driver = 0, count = 0;
  (void)cudaRuntimeGetVersion(&runtime);
  (void)cudaDriverGetVersion(&driver);
  os << "cuda_archs=" << kernels::cuda::builtCudaArchitectures() << " cuda_runtime=" << runtime
     << " cuda_driver=" << driver;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    os << " gpus=0 cuda_error=" << cudaGetErrorName(err);
    return os.str();
  }
  os << " gpus=" << count;
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, d) != cudaSuccess) {
      (void)cudaGetLastError();
      continue;
    }
    std::string name = prop.name;
    for (char& c : name) c = c == ' ' ? '_' : c;
    os << " gpu" << d << "=" << name << ":sm_" << prop.major << prop.minor;
  }
  return os.str();
}

DeviceGuard::DeviceGuard(int device) {
  checkCuda(cudaGetDevice(&previous_), "cudaGetDevice");
  if (previous_ != device) {
    checkCuda(cudaSetDevice(device), "cudaSetDevice");
    changed_ = true;
  }
}

DeviceGuard::~DeviceGuard() {
  if (changed_) (void)cudaSetDevice(previous_);
}

}  // namespace perseus::nccl
