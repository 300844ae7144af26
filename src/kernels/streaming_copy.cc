// Non-temporal copy for outputs larger than the last-level cache (see reduce.h).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/reduce.h"

namespace perseus::kernels {
namespace {

// Below this a plain memcpy wins: the data is likely to be read again from cache.
constexpr size_t kMinStreamingBytes = 256 * 1024;

__attribute__((target("avx2"))) void streamAvx2(unsigned char* dst, const unsigned char* src,
                                                size_t bytes) {
  size_t i = 0;
  for (; i + 128 <= bytes; i += 128) {
    __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 32));
    __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 64));
    __m256i d = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 96));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i), a);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 32), b);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 64), c);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 96), d);
  }
  if (i < bytes) std::memcpy(dst + i, src + i, bytes - i);
}

}  // namespace

void copyStreaming(void* dst, const void* src, size_t bytes) {
  if (bytes < kMinStreamingBytes) {
    std::memcpy(dst, src, bytes);
    return;
  }
  copyNonTemporal(dst, src, bytes);
  nonTemporalFence();
}

// Non-temporal stores are weakly ordered: without the fence, another thread that sees a
// later flag store could still read the old contents.
void nonTemporalFence() { _mm_sfence(); }

void copyNonTemporal(void* dst, const void* src, size_t bytes) {
  static const bool has_avx2 = __builtin_cpu_supports("avx2");
  auto* d = static_cast<unsigned char*>(dst);
  auto* s = static_cast<const unsigned char*>(src);
  if (!has_avx2 || bytes < 256) {
    std::memcpy(d, s, bytes);
    return;
  }
  // Align the destination to 32 bytes, as the streaming stores require.
  const size_t head = (32 - (reinterpret_cast<uintptr_t>(d) & 31)) & 31;
  std::memcpy(d, s, head);
  streamAvx2(d + head, s + head, bytes - head);
}

}  // namespace perseus::kernels
