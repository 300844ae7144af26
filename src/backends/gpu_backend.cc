// The one registration file of the GPU data plane: the only place outside src/backends/nccl/
// that knows whether this build has CUDA.
#include "backends/gpu_backend.h"

#if PERSEUS_HAVE_CUDA
#include "backends/nccl/cuda_util.h"
#include "backends/nccl/nccl_api.h"
#include "backends/nccl/nccl_backend.h"
#endif

namespace perseus::backends {

std::unique_ptr<GpuBackend> createGpuBackend(const GpuBackendOptions& options) {
#if PERSEUS_HAVE_CUDA
  return ::perseus::nccl::createNcclBackend(options);
#else
  (void)options;
  return nullptr;
#endif
}

bool gpuBuildEnabled() {
#if PERSEUS_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

std::string gpuRuntimeReport() {
#if PERSEUS_HAVE_CUDA
  return ::perseus::nccl::cudaRuntimeReport() + " " + ::perseus::nccl::ncclLoadReport();
#else
  return "cuda=0";
#endif
}

int ncclHeaderVersion() {
#if PERSEUS_HAVE_CUDA
  return NCCL_VERSION_CODE;
#else
  return 0;
#endif
}

}  // namespace perseus::backends
