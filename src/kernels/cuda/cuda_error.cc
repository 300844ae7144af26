#include "kernels/cuda/cuda_error.h"

#include "common/status.h"

namespace perseus::kernels::cuda {
namespace {

std::string currentDevice() {
  int device = -1;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return "this GPU";
  }
  return PERSEUS_STR("GPU " << device << " (" << prop.name << ", compute capability " << prop.major
                            << "." << prop.minor << ")");
}

}  // namespace

const char* builtCudaArchitectures() {
#ifdef PERSEUS_CUDA_ARCHS
  return PERSEUS_CUDA_ARCHS;
#else
  return "unknown";
#endif
}

std::string cudaErrorText(cudaError_t err, const char* what) {
  std::string text = PERSEUS_STR("CUDA " << what << " failed: " << cudaGetErrorName(err) << ": "
                                         << cudaGetErrorString(err));
  if (err == cudaErrorNoKernelImageForDevice || err == cudaErrorInvalidKernelImage) {
    text += PERSEUS_STR(". " << currentDevice() << " has no kernel image in this build of Perseus, "
                             << "which holds CUDA architectures " << builtCudaArchitectures()
                             << ". Reinstall with the GPU's architecture, e.g. CMAKE_ARGS="
                             << "\"-DCMAKE_CUDA_ARCHITECTURES=70-real;90-virtual\" pip install . "
                             << "(Volta, sm_70, needs a CUDA 12 toolkit).");
  } else if (err == cudaErrorUnsupportedPtxVersion) {
    text += PERSEUS_STR(". The NVIDIA driver is older than the CUDA toolkit that built Perseus ("
                        << builtCudaArchitectures() << "): update the driver, or build with "
                        << "the GPU's own architecture in CMAKE_CUDA_ARCHITECTURES.");
  }
  return text;
}

}  // namespace perseus::kernels::cuda
