// Whether this machine has a usable CUDA device: GPU tests skip (GTEST_SKIP) without one, as in
// CI, and the no-driver tests skip with one.
#pragma once

namespace perseus::testing {

// False in a build without CUDA, or when the runtime reports no device (no driver, no GPU).
bool haveGpu();

}  // namespace perseus::testing
