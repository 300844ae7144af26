// The batched fusion copy kernel (kernels/cuda/fusion_kernels.h) on a real GPU: exact copies,
// scaling, fp32<->fp16 casts and the NaN report, on random data with ragged sizes and
// misaligned tensors. Skips where there is no GPU.
#include <gtest/gtest.h>

#include "backends/gpu_backend.h"
#include "support/gpu_presence.h"

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

using perseus::testing::haveGpu;

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

// Every tuning the bandwidth test may pick: unroll x grid policy (x wide fp16 loads), and the
// driver's copies (which apply to plain copies only; the rest run the kernel).
std::vector<CopyTuning> allTunings(bool wide_too) {
  std::vector<CopyTuning> out;
  for (bool wide : {false, true}) {
    if (wide && !wide_too) continue;
    for (int u : {4, 8}) {
      for (auto g :
           {CopyTuning::Grid::kResident, CopyTuning::Grid::kBalanced, CopyTuning::Grid::kPerTile}) {
        CopyTuning t;
        t.unroll = u;
        t.grid = g;
        t.wide_half_loads = wide;
        out.push_back(t);
      }
    }
  }
  for (auto d : {CopyTuning::Driver::kMemcpyEach, CopyTuning::Driver::kMemcpyBatch}) {
    CopyTuning t;
    t.driver = d;
    out.push_back(t);
  }
  return out;
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
  for (int i = 0; i < n; ++i)
    entries.push_back({src.at(src_off[i]), dst.at(dst_off[i]), counts[i], i});
  cudaStream_t stream = nullptr;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (const CopyTuning& t : allTunings(false)) {
    for (double scale : {1.0, 0.5}) {
      CK(cudaMemset(dst.p, 0xFF, host.size() * 4));  // poison: NaN patterns
      batchedCopyTuned(entries.data(), n, DataType::kFloat32, DataType::kFloat32, scale, nullptr,
                       stream, t);
      CK(cudaStreamSynchronize(stream));
      std::vector<float> out(host.size());
      CK(cudaMemcpy(out.data(), dst.p, out.size() * 4, cudaMemcpyDeviceToHost));
      for (int i = 0; i < n; ++i) {
        for (size_t k = 0; k < counts[i]; ++k) {
          ASSERT_EQ(out[dst_off[i] / 4 + k], host[src_off[i] / 4 + k] * static_cast<float>(scale))
              << tuningName(t) << " tensor " << i << " element " << k;
        }
      }
    }
  }
  CK(cudaStreamDestroy(stream));
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

// float16 -> float32 under every tuning (the wide path swaps halves between lanes): ragged and
// misaligned tensors, a scale, and the NaN check naming the first bad tensor.
TEST(GpuFusionKernel, HalfToFloatEveryTuning) {
  REQUIRE_GPU();
  std::mt19937 rng(4);
  const int n = 40;
  std::vector<size_t> counts(n), src_off(n), dst_off(n);
  size_t total = 0;
  for (int i = 0; i < n; ++i) {
    counts[i] = (i % 5 == 0) ? 20000 + rng() % 50000 : rng() % 3000;
    src_off[i] = total + (i % 7 == 3 ? 1 : 0);  // elements; some tensors not 16-byte aligned
    dst_off[i] = total + (i % 6 == 4 ? 2 : 0);
    total = (total + counts[i] + 8 + 7) / 8 * 8;
  }
  auto f = randomFloats(total, rng);
  std::vector<uint16_t> halves(total);
  for (size_t i = 0; i < total; ++i) halves[i] = kernels::floatToHalf(f[i]);
  halves[src_off[25] + counts[25] / 2] = 0x7E00;  // NaN in tensor 25 (20000+ elements)
  halves[src_off[30] + counts[30] - 1] = 0x7C00;  // +Inf in tensor 30
  DeviceBuffer src(total * 2), dst(total * 4);
  int* flag = nullptr;
  CK(cudaMalloc(&flag, sizeof(int)));
  CK(cudaMemcpy(src.p, halves.data(), total * 2, cudaMemcpyHostToDevice));
  std::vector<CopyEntry> entries;
  for (int i = 0; i < n; ++i)
    entries.push_back({src.at(src_off[i] * 2), dst.at(dst_off[i] * 4), counts[i], i});
  for (const CopyTuning& t : allTunings(true)) {
    CK(cudaMemset(dst.p, 0xFF, total * 4));
    CK(cudaMemset(flag, 0x7F, sizeof(int)));
    batchedCopyTuned(entries.data(), n, DataType::kFloat16, DataType::kFloat32, 2.0, flag, nullptr,
                     t);
    std::vector<float> out(total);
    int first_bad = 0;
    CK(cudaMemcpy(out.data(), dst.p, total * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(&first_bad, flag, sizeof(int), cudaMemcpyDeviceToHost));
    EXPECT_EQ(first_bad, 25) << tuningName(t);
    for (int i = 0; i < n; ++i) {
      for (size_t k = 0; k < counts[i]; ++k) {
        const float want = kernels::halfToFloat(halves[src_off[i] + k]) * 2.0f;
        const float got = out[dst_off[i] + k];
        if (std::isnan(want)) {
          ASSERT_TRUE(std::isnan(got)) << tuningName(t) << " tensor " << i << " element " << k;
        } else {
          ASSERT_EQ(got, want) << tuningName(t) << " tensor " << i << " element " << k;
        }
      }
    }
  }
  cudaFree(flag);
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
  for (size_t i = 0; i < n; ++i)
    entries.push_back({src.at(i * count * 4), dst.at(i * count * 2), count, static_cast<int>(i)});
  for (DataType dst_type : {DataType::kFloat16, DataType::kFloat32}) {
    if (dst_type == DataType::kFloat32) {
      for (size_t i = 0; i < n; ++i) entries[i].dst = src.at(i * count * 4);  // in place check
    }
    CK(cudaMemset(flag, 0x7F, sizeof(int)));
    batchedCopy(entries.data(), static_cast<int>(n), DataType::kFloat32, dst_type, 1.0, flag,
                nullptr);
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
