// The NCCL data plane on one GPU (world size 1: NCCL refuses two ranks on one device, so the
// multi-rank paths are covered by gpu_host_staged_test). Real NCCL communicators, real streams:
// single-tensor and fused allreduce, fp16 wire, NaN report, forced hierarchical allreduce
// (ncclCommSplit), the other collectives, stream ordering and abort. Skips without a GPU.
#include <gtest/gtest.h>

#include "backends/gpu_backend.h"
#include "support/gpu_presence.h"

#if PERSEUS_HAVE_CUDA
#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "common/status.h"
#include "support/gpu_ranks.h"

namespace perseus::backends {
namespace {

using perseus::testing::haveGpu;

#define CK(x) ASSERT_EQ((x), cudaSuccess) << #x

using perseus::testing::World1;

std::vector<float> upload(float* dev, size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-2.f, 2.f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  EXPECT_EQ(cudaMemcpy(dev, v.data(), n * 4, cudaMemcpyHostToDevice), cudaSuccess);
  return v;
}

std::vector<float> download(const float* dev, size_t n) {
  std::vector<float> v(n);
  EXPECT_EQ(cudaMemcpy(v.data(), dev, n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  return v;
}

class GpuNccl : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!haveGpu()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_F(GpuNccl, SingleTensorAllreduceWaitsOnTheProducerStream) {
  World1 w("gpunccl1");
  auto backend = w.backend(w.params);
  std::mt19937 rng(11);
  const size_t n = 1 << 20;
  float *in = nullptr, *out = nullptr;
  CK(cudaMalloc(&in, n * 4));
  CK(cudaMalloc(&out, n * 4));
  auto host = upload(in, n, rng);
  cudaStream_t producer, consumer;
  CK(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking));
  // The producer overwrites the input asynchronously; the collective must see those bytes.
  std::vector<float> twice(host);
  for (auto& x : twice) x *= 2;
  CK(cudaMemcpyAsync(in, twice.data(), n * 4, cudaMemcpyHostToDevice, producer));
  GpuBatch batch;
  batch.dtype = DataType::kFloat32;
  batch.tensors.push_back({"grad", in, out, n, backend->recordReady(0, producer)});
  auto work = backend->allreduce(*w.comm, batch, ReduceOp::kSum, 0.5, 3.0);
  work->streamWait(consumer);
  std::vector<float> got(n);
  CK(cudaMemcpyAsync(got.data(), out, n * 4, cudaMemcpyDeviceToHost, consumer));
  CK(cudaStreamSynchronize(consumer));
  work->wait();
  EXPECT_EQ(backend->dataPlane(*w.comm, 0), "nccl");
  for (size_t i = 0; i < n; i += 997) ASSERT_FLOAT_EQ(got[i], twice[i] * 0.5f * 3.0f) << i;
  EXPECT_EQ(work->nonFiniteTensor(), "");
  cudaFree(in);
  cudaFree(out);
}

void fusedCase(World1& w, Params p, float tolerance) {
  auto backend = w.backend(p);
  std::mt19937 rng(12);
  const std::vector<size_t> counts = {1, 1000, 33, 300000, 7, 65536};
  GpuBatch batch;
  std::vector<float*> bufs;
  std::vector<std::vector<float>> hosts;
  // A GpuTensor borrows its name for the call: the names outlive the batch.
  std::vector<std::string> names;
  for (size_t i = 0; i < counts.size(); ++i) names.push_back("t" + std::to_string(i));
  for (size_t i = 0; i < counts.size(); ++i) {
    float* b = nullptr;
    EXPECT_EQ(cudaMalloc(&b, counts[i] * 4), cudaSuccess);
    hosts.push_back(upload(b, counts[i], rng));
    bufs.push_back(b);
    batch.tensors.push_back({names[i], b, b, counts[i], nullptr});  // in place
  }
  auto work = backend->allreduce(*w.comm, batch, ReduceOp::kSum, 2.0, 0.25);
  work->wait();
  for (size_t i = 0; i < counts.size(); ++i) {
    auto got = download(bufs[i], counts[i]);
    for (size_t k = 0; k < counts[i]; ++k) {
      ASSERT_NEAR(got[k], hosts[i][k] * 0.5f, tolerance * std::fabs(hosts[i][k]) + 1e-6)
          << i << ":" << k;
    }
    cudaFree(bufs[i]);
  }
}

TEST_F(GpuNccl, FusedBatchAcrossSeveralRounds) {
  World1 w("gpunccl2");
  Params p = w.params;
  p.fusion_threshold = 1 << 20;  // 1 MiB: the 300000-float tensor spans rounds
  p.num_streams = 2;
  fusedCase(w, p, 0);
}

TEST_F(GpuNccl, Fp16OnTheWire) {
  World1 w("gpunccl3");
  Params p = w.params;
  p.allreduce_dtype = 0;
  fusedCase(w, p, 2e-3f);
}

TEST_F(GpuNccl, ForcedHierarchicalAndMixed) {
  World1 w("gpunccl4");
  Params p = w.params;
  p.hierarchical_allreduce = "1";
  p.allreduce_dtype = 2;
  fusedCase(w, p, 0);
}

TEST_F(GpuNccl, NanCheckNamesTheFirstTensor) {
  World1 w("gpunccl5");
  Params p = w.params;
  p.allreduce_nancheck = true;
  auto backend = w.backend(p);
  float* b = nullptr;
  CK(cudaMalloc(&b, 4 * 1000 * 4));
  std::vector<float> host(4000, 1.0f);
  host[2500] = NAN;
  host[3999] = INFINITY;
  CK(cudaMemcpy(b, host.data(), host.size() * 4, cudaMemcpyHostToDevice));
  GpuBatch batch;
  const std::string names[] = {"w0", "w1", "w2", "w3"};  // borrowed by the batch's tensors
  for (int i = 0; i < 4; ++i)
    batch.tensors.push_back({names[i], b + i * 1000, b + i * 1000, 1000, nullptr});
  auto work = backend->allreduce(*w.comm, batch, ReduceOp::kSum, 1.0, 1.0);
  work->wait();
  EXPECT_EQ(work->nonFiniteTensor(), "w2");
  // A single clean tensor goes the direct path and reports nothing.
  GpuBatch one;
  one.tensors.push_back({"clean", b, b, 1000, nullptr});
  auto w2 = backend->allreduce(*w.comm, one, ReduceOp::kSum, 1.0, 1.0);
  w2->wait();
  EXPECT_EQ(w2->nonFiniteTensor(), "");
  cudaFree(b);
}

TEST_F(GpuNccl, OtherCollectives) {
  World1 w("gpunccl6");
  auto backend = w.backend(w.params);
  std::mt19937 rng(13);
  const size_t n = 4099;
  float* in = nullptr;
  CK(cudaMalloc(&in, n * 4));
  auto host = upload(in, n, rng);
  auto out = backend->allocate(0, n * 4);
  float* o = static_cast<float*>(out.get());
  GpuTensor t{"x", in, o, n, nullptr};

  backend->allgatherv(*w.comm, 0, t, o, {n * 4})->wait();
  EXPECT_EQ(download(o, n), host);
  CK(cudaMemset(o, 0, n * 4));
  backend->broadcast(*w.comm, 0, t, n * 4, 0)->wait();
  EXPECT_EQ(download(o, n), host);
  CK(cudaMemset(o, 0, n * 4));
  backend->alltoallv(*w.comm, 0, t, {n * 4}, o, {n * 4})->wait();
  EXPECT_EQ(download(o, n), host);
  backend->reducescatterv(*w.comm, 0, DataType::kFloat32, t, o, {n}, ReduceOp::kAverage, 2.0, 1.0)
      ->wait();
  auto got = download(o, n);
  for (size_t i = 0; i < n; ++i) ASSERT_FLOAT_EQ(got[i], host[i] * 2.0f);
  cudaFree(in);
}

TEST_F(GpuNccl, AbortFailsPendingWorkAndRecovers) {
  World1 w("gpunccl7");
  auto backend = w.backend(w.params);
  const size_t n = 1 << 24;
  float* b = nullptr;
  CK(cudaMalloc(&b, n * 4));
  CK(cudaMemset(b, 0, n * 4));
  GpuBatch batch;
  batch.tensors.push_back({"big", b, b, n, nullptr});
  auto work = backend->allreduce(*w.comm, batch, ReduceOp::kSum, 1.0, 1.0);
  backend->abort(std::make_exception_ptr(PeerLostError(1, "rank 1 lost (test)")));
  EXPECT_THROW(work->wait(), PeerLostError);
  CK(cudaDeviceSynchronize());
  // The next collective builds a fresh communicator.
  auto again = backend->allreduce(*w.comm, batch, ReduceOp::kSum, 1.0, 1.0);
  EXPECT_NO_THROW(again->wait());
  cudaFree(b);
}

// Note [World size one]: the no-op allreduce completes only after the producer's stream
// reached the tensor's ready point, and later streams ordered on it see the producer's bytes.
TEST_F(GpuNccl, WorldOneInPlaceNoOpFollowsTheProducer) {
  World1 w("gpunccl9");
  auto backend = w.backend(w.params);
  std::mt19937 rng(17);
  const size_t n = 1 << 24;
  float* b = nullptr;
  CK(cudaMalloc(&b, n * 4));
  auto host = upload(b, n, rng);
  float* pinned = nullptr;
  CK(cudaHostAlloc(reinterpret_cast<void**>(&pinned), n * 4, cudaHostAllocDefault));
  for (size_t i = 0; i < n; ++i) pinned[i] = host[i] + 1.0f;
  cudaStream_t producer, consumer;
  CK(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking));
  CK(cudaMemcpyAsync(b, pinned, n * 4, cudaMemcpyHostToDevice, producer));  // 64 MiB: takes a while
  GpuBatch batch;
  batch.device = 0;
  batch.dtype = DataType::kFloat32;
  batch.tensors.push_back({"g", b, b, n, backend->recordReady(0, producer)});
  auto work = backend->allreduce(*w.comm, batch, ReduceOp::kAverage, 1.0, 1.0);
  work->streamWait(consumer);
  std::vector<float> got(n);
  CK(cudaMemcpyAsync(got.data(), b, n * 4, cudaMemcpyDeviceToHost, consumer));
  CK(cudaStreamSynchronize(consumer));
  work->wait();
  CK(cudaStreamQuery(producer));  // done: the work could not complete before it
  for (size_t i = 0; i < n; i += 4099) ASSERT_EQ(got[i], host[i] + 1.0f) << i;
  cudaFreeHost(pinned);
  cudaFree(b);
  cudaStreamDestroy(producer);
  cudaStreamDestroy(consumer);
}

}  // namespace
}  // namespace perseus::backends

#else
TEST(GpuNccl, SkippedWithoutCuda) { GTEST_SKIP() << "build without CUDA"; }
#endif
