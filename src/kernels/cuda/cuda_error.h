// The text of a failed CUDA call, with what to do about the failures a user can fix: a GPU
// this build has no machine code or PTX for, a driver older than the PTX.
#pragma once

#include <cuda_runtime.h>

#include <string>

namespace perseus::kernels::cuda {

// "CUDA <what> failed: cudaErrorX: <text>", plus the device and the build's architectures when
// err says the kernels cannot run on the current device.
std::string cudaErrorText(cudaError_t err, const char* what);

// The CUDA architectures this build holds code for, e.g. "75-real,80-real,...,120-virtual".
const char* builtCudaArchitectures();

}  // namespace perseus::kernels::cuda
