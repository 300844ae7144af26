// The batched fusion copy kernel (kernels/cuda/fusion_kernels.h) on a real GPU: exact copies,
// scaling, fp32<->fp16 casts and the NaN report, on random data with ragged sizes and
// misaligned tensors. Skips where there is no GPU.
#include <gtest/gtest.h>

#include "backends/gpu_backend.h"

#if PERSEUS_HAVE_CUDA
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cuda/fusion_kernels.h"
#include "kernels/reduce.h"

namespace perseus::kernels::cuda {
namespace {

bool haveGpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define REQUIRE_GPU() \
  if (!haveGpu()) GTEST_SKIP() << "no CUDA device"

#define CK(x) ASSERT_EQ((x), cudaSuccess) << #x

struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(size_t bytes) { EXPECT_EQ(cudaMalloc(&p, bytes + 64), cudaSuccess); }
  ~DeviceBuffer() { cudaFree(p); }
  char* at(size_t off) const { return static_cast<char*>(p) + off; }
};

std::vector<float> randomFloats(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-4.f, 4.f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

TEST(GpuFusionKernel, ExactCopyOfRaggedMisalignedTensors) {
  REQUIRE_GPU();
  std::mt19937 rng(1);
  // 300 tensors: more than one launch table; sizes from 0 to beyond one tile; odd offsets.
  const int n = 300;
  std::vector<size_t> counts(n), src_off(n), dst_off(n);
  size_t total = 0;
  for (int i = 0; i < n; ++i) {
    counts[i] = (i % 7 == 0) ? rng() % 70000 : rng() % 900;
    src_off[i] = total * 4 + (i % 3) * 4;  // some tensors not 16-byte aligned
    dst_off[i] = total * 4 + (i % 5) * 4;
    total += counts[i] + 8;
  }
  auto host = randomFloats(total + 8, rng);
  DeviceBuffer src(host.size() * 4), dst(host.size() * 4);
  CK(cudaMemcpy(src.p, host.data(), host.size() * 4, cudaMemcpyHostToDevice));
  std::vector<CopyEntry> entries;
  for (int i = 0; i < n; ++i) entries.push_back({src.at(src_off[i]), dst.at(dst_off[i]), counts[i], i});
  for (int unroll : {4, 8}) {
    for (double scale : {1.0, 0.5}) {
      CK(cudaMemset(dst.p, 0xFF, host.size() * 4));  // poison: NaN patterns
      batchedCopyUnrolled(entries.data(), n, DataType::kFloat32, DataType::kFloat32, scale, nullptr,
                          nullptr, unroll);
      CK(cudaDeviceSynchronize());
      std::vector<float> out(host.size());
      CK(cudaMemcpy(out.data(), dst.p, out.size() * 4, cudaMemcpyDeviceToHost));
      for (int i = 0; i < n; ++i) {
        for (size_t k = 0; k < counts[i]; ++k) {
          ASSERT_EQ(out[dst_off[i] / 4 + k], host[src_off[i] / 4 + k] * static_cast<float>(scale))
              << "unroll " << unroll << " tensor " << i << " element " << k;
        }
      }
    }
  }
}

TEST(GpuFusionKernel, ScaleAndCastRoundTrip) {
  REQUIRE_GPU();
  std::mt19937 rng(2);
  const std::vector<size_t> counts = {1, 17, 4096, 100003, 3};
  size_t total = 0;
  for (size_t c : counts) total += c;
  auto host = randomFloats(total, rng);
  DeviceBuffer src(total * 4), half(total * 2), back(total * 4);
  CK(cudaMemcpy(src.p, host.data(), total * 4, cudaMemcpyHostToDevice));
  std::vector<CopyEntry> down, up;
  size_t off = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    down.push_back({src.at(off * 4), half.at(off * 2), counts[i], static_cast<int>(i)});
    up.push_back({half.at(off * 2), back.at(off * 4), counts[i], static_cast<int>(i)});
    off += counts[i];
  }
  batchedCopy(down.data(), static_cast<int>(down.size()), DataType::kFloat32, DataType::kFloat16,
              0.5, nullptr, nullptr);
  batchedCopy(up.data(), static_cast<int>(up.size()), DataType::kFloat16, DataType::kFloat32, 4.0,
              nullptr, nullptr);
  CK(cudaDeviceSynchronize());
  std::vector<uint16_t> h(total);
  std::vector<float> b(total);
  CK(cudaMemcpy(h.data(), half.p, total * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(b.data(), back.p, total * 4, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < total; ++i) {
    // Same rounding as the CPU kernels (round to nearest even).
    ASSERT_EQ(h[i], kernels::floatToHalf(host[i] * 0.5f)) << i;
    ASSERT_FLOAT_EQ(b[i], kernels::halfToFloat(h[i]) * 4.0f) << i;
  }
}

TEST(GpuFusionKernel, IntegerScaleTruncatesLikeTheCpu) {
  REQUIRE_GPU();
  std::vector<int32_t> host = {7, -7, 100, -1, 0, 2147483647};
  DeviceBuffer buf(host.size() * 4);
  CK(cudaMemcpy(buf.p, host.data(), host.size() * 4, cudaMemcpyHostToDevice));
  CopyEntry e{buf.p, buf.p, host.size(), 0};
  batchedCopy(&e, 1, DataType::kInt32, DataType::kInt32, 0.5, nullptr, nullptr);
  std::vector<int32_t> out(host.size());
  CK(cudaMemcpy(out.data(), buf.p, out.size() * 4, cudaMemcpyDeviceToHost));
  auto expect = host;
  kernels::scale(expect.data(), expect.size(), DataType::kInt32, 0.5);
  EXPECT_EQ(out, expect);
}

TEST(GpuFusionKernel, NanCheckReportsTheFirstTensor) {
  REQUIRE_GPU();
  std::mt19937 rng(3);
  const size_t n = 6, count = 5000;
  auto host = randomFloats(n * count, rng);
  host[4 * count + 4999] = std::nanf("");
  host[2 * count + 17] = INFINITY;
  DeviceBuffer src(host.size() * 4), dst(host.size() * 2);
  int* flag = nullptr;
  CK(cudaMalloc(&flag, sizeof(int)));
  CK(cudaMemcpy(src.p, host.data(), host.size() * 4, cudaMemcpyHostToDevice));
  std::vector<CopyEntry> entries;
  for (size_t i = 0; i < n; ++i) entries.push_back({src.at(i * count * 4), dst.at(i * count * 2), count, static_cast<int>(i)});
  for (DataType dst_type : {DataType::kFloat16, DataType::kFloat32}) {
    if (dst_type == DataType::kFloat32) {
      for (size_t i = 0; i < n; ++i) entries[i].dst = src.at(i * count * 4);  // in place check
    }
    CK(cudaMemset(flag, 0x7F, sizeof(int)));
    batchedCopy(entries.data(), static_cast<int>(n), DataType::kFloat32, dst_type, 1.0, flag, nullptr);
    int result = 0;
    CK(cudaMemcpy(&result, flag, sizeof(int), cudaMemcpyDeviceToHost));
    EXPECT_EQ(result, 2) << dataTypeName(dst_type);
  }
  cudaFree(flag);
}

}  // namespace
}  // namespace perseus::kernels::cuda

#else
TEST(GpuFusionKernel, SkippedWithoutCuda) { GTEST_SKIP() << "build without CUDA"; }
#endif
