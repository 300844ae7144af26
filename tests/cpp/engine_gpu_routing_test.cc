// CUDA tensors through the engine: the device kind is negotiated metadata, fusion never mixes
// CPU and CUDA tensors, and CUDA tensors without a usable backend fail at submission with
// UnsupportedError. The GPU tests (skipped without a driver) check results of world size 1
// (C API) and of two ranks on one GPU (host-staged, engine threads).
#include <gtest/gtest.h>

#include <cstring>

#include "backends/gpu_backend.h"
#include "fusion/tensor_groups.h"
#include "negotiation/coordinator.h"
#include "negotiation/wire.h"
#include "perseus/c_api.h"
#include "support/engine_ranks.h"
#include "support/gpu_presence.h"

#if PERSEUS_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace perseus::engine {
namespace {

Request allreduce(const std::string& name, DeviceKind kind) {
  Request q;
  q.op = OpType::kAllreduce;
  q.name = name;
  q.tensors.push_back({DataType::kFloat32, {4}});
  q.device_kind = kind;
  return q;
}

TEST(EngineGpuRouting, DeviceKindMismatchIsAnError) {
  Request cpu = allreduce("w", DeviceKind::kCpu);
  Request gpu = allreduce("w", DeviceKind::kCuda);
  Response r = constructResponse("w", {&cpu, &gpu});
  ASSERT_TRUE(r.is_error);
  EXPECT_EQ(r.error_code, StatusCode::kMismatch);
  EXPECT_NE(r.error_message.find("devices"), std::string::npos) << r.error_message;
  EXPECT_NE(r.error_message.find("CUDA"), std::string::npos) << r.error_message;
  EXPECT_NE(r.error_message.find("'w'"), std::string::npos) << r.error_message;
  Response ok = constructResponse("w", {&gpu, &gpu});
  EXPECT_FALSE(ok.is_error);
  EXPECT_EQ(ok.device_kind, DeviceKind::kCuda);
  EXPECT_FALSE(cpu.sameMetadata(gpu));  // the cache never serves a CPU answer to CUDA
}

TEST(EngineGpuRouting, WireKeepsTheDeviceKind) {
  auto qs = decodeRequests(encodeRequests({allreduce("a", DeviceKind::kCuda)}));
  ASSERT_EQ(qs.size(), 1u);
  EXPECT_EQ(qs[0].device_kind, DeviceKind::kCuda);
  Response r;
  r.name = "a";
  r.device_kind = DeviceKind::kCuda;
  auto rs = decodeResponses(encodeResponses({r}));
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_EQ(rs[0].device_kind, DeviceKind::kCuda);
}

TEST(EngineGpuRouting, FusionNeverMixesDevices) {
  std::vector<Response> rs;
  for (int i = 0; i < 4; ++i) {
    Response r;
    r.name = "t" + std::to_string(i);
    r.tensors.push_back({DataType::kFloat32, {4}});
    r.device_kind = i % 2 ? DeviceKind::kCuda : DeviceKind::kCpu;
    rs.push_back(r);
  }
  auto plan = fusion::planGroups(rs, 2, 1 << 20);
  ASSERT_EQ(plan.size(), 2u);
  for (const FusionGroup& g : plan) {
    ASSERT_EQ(g.items.size(), 2u);
    EXPECT_EQ(rs[g.items[0].response].device_kind, rs[g.items[1].response].device_kind);
  }
}

using perseus::testing::haveGpu;

TEST(EngineGpuRouting, CudaTensorWithoutUsableBackendIsUnsupported) {
  if (haveGpu()) GTEST_SKIP() << "a GPU is present";
  testing::EngineRanks ranks(1, testing::engineTestParams());
  Engine& e = ranks.engine(0);
  std::vector<float> a(4);
  TensorArg t{a.data(), DataType::kFloat32, {4}, 0, nullptr};
  try {
    e.allreduce("g", {t}, {a.data()}, ReduceOp::kSum);
    FAIL() << "expected UnsupportedError";
  } catch (const UnsupportedError& err) {
    EXPECT_NE(std::string(err.what()).find("CPU"), std::string::npos) << err.what();
  }
  TensorArg cpu{a.data(), DataType::kFloat32, {4}, -1, nullptr};
  EXPECT_THROW(e.allreduce("mixed", {cpu, t}, {a.data(), a.data()}, ReduceOp::kSum),
               InvalidArgumentError);
  // The engine still works for CPU tensors afterwards.
  auto h = e.allreduce("c", {cpu}, {a.data()}, ReduceOp::kSum);
  ASSERT_TRUE(h->wait(10));
  EXPECT_EQ(h->status(), StatusCode::kOk) << h->message();
}

#if PERSEUS_HAVE_CUDA
std::vector<float> toHost(const void* d, size_t n) {
  std::vector<float> h(n);
  cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost);
  return h;
}

float* toDevice(const std::vector<float>& h) {
  void* d = nullptr;
  cudaMalloc(&d, h.size() * sizeof(float));
  cudaMemcpy(d, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice);
  return static_cast<float*>(d);
}

TEST(EngineGpuRouting, WorldSizeOneThroughTheCApi) {
  if (!haveGpu()) GTEST_SKIP() << "no GPU";
  ASSERT_EQ(perseus_init(), PERSEUS_OK) << perseus_last_error();
  float* d = toDevice({1, 2, 3, 4});
  int64_t shape[1] = {4};
  perseus_tensor t{d, PERSEUS_FLOAT32, 1, shape, 0, nullptr};
  perseus_handle h;
  ASSERT_EQ(perseus_allreduce("ar", &t, &t, PERSEUS_SUM, 2.0, 1.0, 0, &h), PERSEUS_OK)
      << perseus_last_error();
  ASSERT_EQ(perseus_handle_cuda_stream_wait(h, nullptr), PERSEUS_OK) << perseus_last_error();
  ASSERT_EQ(perseus_wait(h, 30), PERSEUS_OK) << perseus_last_error();
  EXPECT_EQ(toHost(d, 4), (std::vector<float>{2, 4, 6, 8}));
  perseus_release(h);
  ASSERT_EQ(perseus_allgather("ag", &t, 0, &h), PERSEUS_OK) << perseus_last_error();
  ASSERT_EQ(perseus_wait(h, 30), PERSEUS_OK) << perseus_last_error();
  perseus_tensor out;
  ASSERT_EQ(perseus_handle_output(h, 0, &out), PERSEUS_OK);
  EXPECT_EQ(out.device, 0);
  EXPECT_EQ(toHost(out.data, 4), (std::vector<float>{2, 4, 6, 8}));
  perseus_release(h);
  ASSERT_EQ(perseus_broadcast("bc", &t, &t, 0, 0, &h), PERSEUS_OK) << perseus_last_error();
  ASSERT_EQ(perseus_wait(h, 30), PERSEUS_OK) << perseus_last_error();
  perseus_release(h);
  cudaFree(d);
  perseus_shutdown();
}

// The blocking calls take CUDA tensors like the asynchronous ones: the general path, with the
// host waiting for completion, so the result is on the device when the call returns.
TEST(EngineGpuRouting, BlockingCallsOnCudaTensorsThroughTheCApi) {
  if (!haveGpu()) GTEST_SKIP() << "no GPU";
  ASSERT_EQ(perseus_init(), PERSEUS_OK) << perseus_last_error();
  float* d = toDevice({1, 2, 3, 4});
  float* o = toDevice({0, 0, 0, 0});
  int64_t shape[1] = {4};
  perseus_tensor t{d, PERSEUS_FLOAT32, 1, shape, 0, nullptr};
  perseus_tensor out{o, PERSEUS_FLOAT32, 1, shape, 0, nullptr};
  for (int k = 0; k < 3; ++k) {  // first runs negotiated, the later ones from the cache
    ASSERT_EQ(perseus_allreduce_blocking("ar.blocking", &t, &out, PERSEUS_SUM, 2.0, 1.0, 0),
              PERSEUS_OK)
        << perseus_last_error();
    EXPECT_EQ(toHost(o, 4), (std::vector<float>{2, 4, 6, 8})) << "run " << k;
  }
  ASSERT_EQ(perseus_allreduce_blocking("ar.blocking.inplace", &t, &t, PERSEUS_SUM, 1.0, 0.5, 0),
            PERSEUS_OK)
      << perseus_last_error();
  EXPECT_EQ(toHost(d, 4), (std::vector<float>{0.5f, 1, 1.5f, 2}));
  ASSERT_EQ(perseus_broadcast_blocking("bc.blocking", &t, &out, 0, 0), PERSEUS_OK)
      << perseus_last_error();
  EXPECT_EQ(toHost(o, 4), (std::vector<float>{0.5f, 1, 1.5f, 2}));
  cudaFree(o);
  cudaFree(d);
  perseus_shutdown();
}

// perseus_allreduce_on_stream: `stream` is ordered after the allreduce with no handle, both
// where the work is the producer's own ready event (in place at world size 1, the same stream:
// nothing to wait for) and where it runs on the slot stream (a prescale, another stream).
TEST(EngineGpuRouting, AllreduceOnStreamOrdersTheStreamAfterIt) {
  if (!haveGpu()) GTEST_SKIP() << "no GPU";
  ASSERT_EQ(perseus_init(), PERSEUS_OK) << perseus_last_error();
  cudaStream_t producer = nullptr, consumer = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking), cudaSuccess);
  float* d = toDevice({0, 0, 0, 0});
  float* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(reinterpret_cast<void**>(&pinned), 8 * sizeof(float)), cudaSuccess);
  int64_t shape[1] = {4};
  perseus_tensor t{d, PERSEUS_FLOAT32, 1, shape, 0, producer};
  // Produces k*10+i on `producer`, allreduces it with `prescale` ordering `stream` after it,
  // reads it back on `stream`: prescale * (k*10+i) unless `stream` ran ahead.
  auto roundTrip = [&](const char* name, double prescale, cudaStream_t stream, int k) {
    for (int i = 0; i < 4; ++i) pinned[i] = static_cast<float>(k * 10 + i);
    cudaMemcpyAsync(d, pinned, 4 * sizeof(float), cudaMemcpyHostToDevice, producer);
    ASSERT_EQ(perseus_allreduce_on_stream(name, &t, &t, PERSEUS_SUM, prescale, 1.0, 0, stream),
              PERSEUS_OK)
        << perseus_last_error();
    cudaMemcpyAsync(pinned + 4, d, 4 * sizeof(float), cudaMemcpyDeviceToHost, stream);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    for (int i = 0; i < 4; ++i)
      EXPECT_EQ(pinned[4 + i], static_cast<float>(prescale) * (k * 10 + i)) << name << " " << k;
  };
  for (int k = 0; k < 4; ++k) {  // first runs negotiated, the later ones from the cache
    roundTrip("ar.stream.same", 1.0, producer, k);
    roundTrip("ar.stream.other", 2.0, consumer, k);
  }
  ASSERT_EQ(cudaStreamSynchronize(producer), cudaSuccess);
  cudaFreeHost(pinned);
  cudaFree(d);
  cudaStreamDestroy(consumer);
  cudaStreamDestroy(producer);
  perseus_shutdown();
}

TEST(EngineGpuRouting, TwoRanksOnOneGpuHostStaged) {
  if (!haveGpu()) GTEST_SKIP() << "no GPU";
  testing::EngineRanks ranks(2, testing::engineTestParams());
  ranks.run([](int r, Engine& e) {
    cudaSetDevice(0);
    float* d = toDevice({1.0f + r, 2.0f + r});
    TensorArg t{d, DataType::kFloat32, {2}, 0, nullptr};
    auto h = e.allreduce("ar", {t}, {d}, ReduceOp::kSum);
    if (!h->wait(60) || h->status() != StatusCode::kOk)
      throw std::runtime_error("allreduce: " + h->message());
    if (toHost(d, 2) != std::vector<float>{3, 5})
      throw std::runtime_error("allreduce: wrong result");
    auto g = e.allgather("ag", {t});
    if (!g->wait(60) || g->status() != StatusCode::kOk)
      throw std::runtime_error("allgather: " + g->message());
    if (toHost(g->outputs()[0].ptr(), 4) != std::vector<float>{3, 5, 3, 5})
      throw std::runtime_error("allgather: wrong result");
    float* b = toDevice({10.0f * r, 1});
    TensorArg bt{b, DataType::kFloat32, {2}, 0, nullptr};
    auto bh = e.broadcast("bc", bt, b, 1);
    if (!bh->wait(60) || bh->status() != StatusCode::kOk)
      throw std::runtime_error("broadcast: " + bh->message());
    if (toHost(b, 2) != std::vector<float>{10, 1})
      throw std::runtime_error("broadcast: wrong result");
    cudaFree(b);
    cudaFree(d);
  });
}
#endif

}  // namespace
}  // namespace perseus::engine
