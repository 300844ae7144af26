// Private to src/kernels/*.cc: how kernels ask GCC for vector code.
//
// The build is -O2 (RelWithDebInfo), where GCC's "very cheap" cost model leaves most loops
// scalar. Kernel files therefore say PERSEUS_KERNEL_OPTIMIZE (after their includes) to get
// -O3 with the dynamic cost model, and mark hot entry points PERSEUS_SIMD_CLONES so that one
// binary carries AVX-512, AVX2 and baseline versions, picked by the loader (ifunc).
#pragma once

#define PERSEUS_KERNEL_OPTIMIZE _Pragma("GCC optimize(\"O3\", \"vect-cost-model=dynamic\")")

// Not under ThreadSanitizer: ifunc resolvers run during relocation, before the TSan runtime is
// up, and their instrumented code crashes the process at load time.
#if defined(__x86_64__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define PERSEUS_SIMD_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define PERSEUS_SIMD_CLONES
#endif

namespace perseus::kernels {

// True when the CPU has F16C (half <-> float in hardware). Cached after the first call.
bool cpuHasF16c();

}  // namespace perseus::kernels
