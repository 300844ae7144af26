// A CUDA build must still run where there is no GPU or driver (as in CI): creating the backend
// touches nothing, and a CUDA tensor gives a clear UnsupportedError only when it is used.
#include <gtest/gtest.h>

#include "backends/gpu_backend.h"
#include "common/status.h"
#include "support/gpu_presence.h"

#if PERSEUS_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace perseus::backends {
namespace {

using perseus::testing::haveGpu;

TEST(GpuNoDriver, CudaTensorFailsClearly) {
  if (!gpuBuildEnabled()) GTEST_SKIP() << "build without CUDA";
  if (haveGpu()) GTEST_SKIP() << "a GPU is present: this test is for machines without one";
  auto backend = createGpuBackend(GpuBackendOptions{});
  ASSERT_NE(backend, nullptr);
  try {
    backend->recordReady(0, nullptr);
    FAIL() << "expected UnsupportedError";
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA cannot be used"), std::string::npos) << e.what();
  }
  EXPECT_THROW(backend->allocate(0, 16), UnsupportedError);
}

TEST(GpuBackendFactory, MatchesTheBuild) {
  GpuBackendOptions options;
  auto backend = createGpuBackend(options);
  // Creating the backend touches no driver, so this holds on machines without a GPU too.
  EXPECT_EQ(backend != nullptr, gpuBuildEnabled());
}

}  // namespace
}  // namespace perseus::backends
