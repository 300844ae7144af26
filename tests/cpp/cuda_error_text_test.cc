// What a user reads when the GPU has no kernel image in this build: the GPU, the architectures
// the build holds and how to rebuild. Runs without a GPU (the text is built from the error
// code; the device part falls back to "this GPU").
#include <gtest/gtest.h>

#include <string>

#if PERSEUS_HAVE_CUDA
#include "kernels/cuda/cuda_error.h"
#endif

namespace {

#if PERSEUS_HAVE_CUDA
TEST(CudaErrorText, NoKernelImageNamesTheBuiltArchitecturesAndTheFix) {
  const std::string text =
      perseus::kernels::cuda::cudaErrorText(cudaErrorNoKernelImageForDevice, "kernel launch");
  EXPECT_NE(text.find("cudaErrorNoKernelImageForDevice"), std::string::npos) << text;
  EXPECT_NE(text.find(perseus::kernels::cuda::builtCudaArchitectures()), std::string::npos) << text;
  EXPECT_NE(text.find("90-real"), std::string::npos) << text;
  EXPECT_NE(text.find("CMAKE_CUDA_ARCHITECTURES"), std::string::npos) << text;
  EXPECT_NE(text.find("GPU"), std::string::npos) << text;
}

TEST(CudaErrorText, OtherErrorsStayPlain) {
  const std::string text =
      perseus::kernels::cuda::cudaErrorText(cudaErrorMemoryAllocation, "cudaMalloc");
  EXPECT_EQ(text.find("CMAKE_CUDA_ARCHITECTURES"), std::string::npos) << text;
  EXPECT_NE(text.find("cudaMalloc"), std::string::npos) << text;
}
#else
TEST(CudaErrorText, BuildWithoutCuda) { GTEST_SKIP() << "build without CUDA"; }
#endif

}  // namespace
