// Note [Batched fusion copy]
// One launch moves a whole table of tensors. Each tensor is cut into tiles of kTileElems
// elements; tile_start[] (a prefix sum, computed on the host) maps a global tile number to its
// tensor by binary search, so every block of a persistent grid walks tiles of any tensor with
// no per-tensor launch. A full tile of an aligned tensor is moved with 16-byte vector accesses,
// kUnroll independent loads in flight per thread before the first store; ragged tails and
// unaligned tensors take an element-wise loop. The scale, the cast and the NaN check happen in
// registers, so the bytes cross device memory once each way.
//
// CopyTuning picks among variants that the bandwidth test times side by side in one device
// call (the H200 figures are in docs/perf/gpu.md): the unroll, the grid policy (resident,
// balanced or one block per tile: how evenly the last round of tiles fills the chip), 16-byte
// input loads for float16->float32, and the driver's copies for plain copies.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <type_traits>
#include <vector>

#include "common/status.h"
#include "kernels/cuda/cuda_error.h"
#include "kernels/cuda/fusion_kernels.h"

namespace perseus::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxDevices = 64;

struct LaunchTable {
  const void* src[kMaxEntriesPerLaunch];
  void* dst[kMaxEntriesPerLaunch];
  uint64_t count[kMaxEntriesPerLaunch];
  int tag[kMaxEntriesPerLaunch];
  uint32_t tile_start[kMaxEntriesPerLaunch + 1];
};
static_assert(sizeof(LaunchTable) + 64 < 4096, "kernel parameters must stay under 4 KiB");

// Arithmetic type of an element: float for the 16/32-bit floats, double for the rest, so that
// integers scale as the CPU kernels do.
template <typename T>
struct Compute {
  using type = double;
};
template <>
struct Compute<float> {
  using type = float;
};
template <>
struct Compute<__half> {
  using type = float;
};
template <>
struct Compute<__nv_bfloat16> {
  using type = float;
};

template <typename C, typename T>
__device__ __forceinline__ C load(T x) {
  return static_cast<C>(x);
}
template <>
__device__ __forceinline__ float load<float, __half>(__half x) {
  return __half2float(x);
}
template <>
__device__ __forceinline__ float load<float, __nv_bfloat16>(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
template <typename T, typename C>
__device__ __forceinline__ T store(C x) {
  return static_cast<T>(x);
}
template <>
__device__ __forceinline__ __half store<__half, float>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 store<__nv_bfloat16, float>(float x) {
  return __float2bfloat16_rn(x);
}

template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

// Streaming (evict-first) 16- or 8-byte accesses: the buffers are far larger than L2 and are
// touched once, so they should not push other data out.
template <typename V>
__device__ __forceinline__ V loadStreaming(const V* p) {
  static_assert(sizeof(V) % 16 == 0 || sizeof(V) == 8, "vector of 8 or 16n bytes");
  V v;
  if constexpr (sizeof(V) % 16 == 0) {
#pragma unroll
    for (int i = 0; i < static_cast<int>(sizeof(V) / 16); ++i) {
      reinterpret_cast<uint4*>(&v)[i] = __ldcs(reinterpret_cast<const uint4*>(p) + i);
    }
  } else {
    *reinterpret_cast<uint2*>(&v) = __ldcs(reinterpret_cast<const uint2*>(p));
  }
  return v;
}
template <typename V>
__device__ __forceinline__ void storeStreaming(V* p, const V& v) {
  if constexpr (sizeof(V) % 16 == 0) {
#pragma unroll
    for (int i = 0; i < static_cast<int>(sizeof(V) / 16); ++i) {
      __stcs(reinterpret_cast<uint4*>(p) + i, reinterpret_cast<const uint4*>(&v)[i]);
    }
  } else {
    __stcs(reinterpret_cast<uint2*>(p), *reinterpret_cast<const uint2*>(&v));
  }
}

__device__ __forceinline__ bool aligned(const void* p, size_t a) {
  return (reinterpret_cast<uintptr_t>(p) & (a - 1)) == 0;
}

// Elements per vector access: 16 bytes on the output side. Every store instruction of a warp
// then covers whole sectors; a wider output vector (two 16-byte stores per thread, 32 bytes
// apart) measured 50% of copy bandwidth on an H200 against 85% for this layout, presumably
// because streaming stores leave half-written sectors to be merged in DRAM. Loads may be 8 or
// 32 bytes (fp16->fp32, fp32->fp16); the 32-byte loads of the fp32->fp16 cast measured 92%.
template <typename Tin, typename Tout>
__host__ __device__ constexpr int vecElems() {
  return 16 / sizeof(Tout);
}

// Elements a thread moves per vector step: vecElems<>() normally; with kWide (float16->float32
// only) 8 halves = one 16-byte load, stored as two 16-byte vectors.
template <typename Tin, typename Tout, bool kWide>
__host__ __device__ constexpr int stepElems() {
  return kWide ? 16 / sizeof(Tin) : vecElems<Tin, Tout>();
}

template <typename Tin, typename Tout, bool kScale, bool kCheck, int kUnroll, bool kWide>
__global__ void __launch_bounds__(kThreads)
    batchedCopyKernel(const __grid_constant__ LaunchTable table, int n,
                      typename Compute<Tin>::type scale, int* nan_flag) {
  using C = typename Compute<Tin>::type;
  static_assert(!kWide || (sizeof(Tin) == 2 && sizeof(Tout) == 4), "wide: 16-bit -> 32-bit only");
  constexpr int kVec = vecElems<Tin, Tout>();
  constexpr int kStep = stepElems<Tin, Tout, kWide>();
  constexpr uint64_t kTileElems = uint64_t{kThreads} * kUnroll * kStep;
  using VecIn = Vec<Tin, kStep>;
  using VecOut = Vec<Tout, kVec>;
  const uint32_t total = table.tile_start[n];

  for (uint32_t tile = blockIdx.x; tile < total; tile += gridDim.x) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
      int mid = (lo + hi + 1) / 2;
      if (table.tile_start[mid] <= tile)
        lo = mid;
      else
        hi = mid - 1;
    }
    const int e = lo;
    const Tin* src = static_cast<const Tin*>(table.src[e]);
    Tout* dst = static_cast<Tout*>(table.dst[e]);
    const uint64_t base = uint64_t{tile - table.tile_start[e]} * kTileElems;
    const uint64_t end = base + kTileElems < table.count[e] ? base + kTileElems : table.count[e];
    bool bad = false;
    auto convert = [&](Tin x) {
      C c = load<C>(x);
      if (kCheck) bad |= !isfinite(c);
      if (kScale) c *= scale;
      return store<Tout>(c);
    };
    // The branch is uniform over the block (it depends on the tile only), so the warp shuffles
    // of the wide path see every lane.
    if (end - base == kTileElems && aligned(src, sizeof(VecIn)) && aligned(dst, sizeof(VecOut))) {
      const VecIn* in = reinterpret_cast<const VecIn*>(src + base);
      VecOut* out = reinterpret_cast<VecOut*>(dst + base);
      VecIn v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) v[u] = loadStreaming(in + u * kThreads + threadIdx.x);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if constexpr (kWide) {
          // Thread pair (2p, 2p+1) holds input chunks d and d+1 (8 elements each), whose outputs
          // are the 16-byte vectors 2d..2d+3. Store A writes 2d (even lane, its low half) and
          // 2d+1 (odd lane, the even lane's high half): one whole 32-byte sector; store B
          // writes 2d+2 and 2d+3 likewise. So each lane sends the half its partner stores.
          const int odd = threadIdx.x & 1;
          const uint64_t d = uint64_t{static_cast<uint32_t>(u * kThreads)} + threadIdx.x;
          const uint2 mine_lo = reinterpret_cast<const uint2*>(&v[u])[0];
          const uint2 mine_hi = reinterpret_cast<const uint2*>(&v[u])[1];
          const uint2 send = odd ? mine_lo : mine_hi;
          uint2 recv;
          recv.x = __shfl_xor_sync(0xffffffffu, send.x, 1);
          recv.y = __shfl_xor_sync(0xffffffffu, send.y, 1);
          const uint2 a = odd ? recv : mine_lo;  // stored at vector 2d - odd
          const uint2 b = odd ? mine_hi : recv;  // stored at vector 2d + 2 - odd
          const Tin* ha = reinterpret_cast<const Tin*>(&a);
          const Tin* hb = reinterpret_cast<const Tin*>(&b);
          VecOut oa, ob;
#pragma unroll
          for (int k = 0; k < kVec; ++k) {
            oa.v[k] = convert(ha[k]);
            ob.v[k] = convert(hb[k]);
          }
          storeStreaming(out + 2 * d - odd, oa);
          storeStreaming(out + 2 * d + 2 - odd, ob);
        } else if constexpr (std::is_same_v<Tin, Tout> && !kScale && !kCheck) {
          storeStreaming(out + u * kThreads + threadIdx.x, v[u]);  // plain copy: no arithmetic
        } else {
          VecOut o;
#pragma unroll
          for (int k = 0; k < kVec; ++k) o.v[k] = convert(v[u].v[k]);
          storeStreaming(out + u * kThreads + threadIdx.x, o);
        }
      }
    } else {
      for (uint64_t i = base + threadIdx.x; i < end; i += kThreads) {
        if constexpr (std::is_same_v<Tin, Tout> && !kScale && !kCheck) {
          dst[i] = src[i];
        } else {
          dst[i] = convert(src[i]);
        }
      }
    }
    if (kCheck && bad) atomicMin(nan_flag, table.tag[e]);
  }
}

void throwIfFailed(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    throw InternalError(cudaErrorText(err, what));
  }
}

// Blocks of the persistent grid for `kernel`: exactly as many as can be resident at once, so
// that no block starts late and leaves a tail (cached per kernel and device).
template <typename Kernel>
int residentBlocks(Kernel kernel, std::atomic<int> (&cache)[kMaxDevices]) {
  int device = 0;
  throwIfFailed(cudaGetDevice(&device), "cudaGetDevice");
  const bool cacheable = device >= 0 && device < kMaxDevices;
  if (cacheable) {
    if (int v = cache[device].load(std::memory_order_relaxed)) return v;
  }
  int sms = 0, per_sm = 0;
  throwIfFailed(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
                "cudaDeviceGetAttribute");
  throwIfFailed(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, 0),
                "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  const int blocks = std::max(1, sms) * std::max(1, per_sm);
  if (cacheable) cache[device].store(blocks, std::memory_order_relaxed);
  return blocks;
}

// Blocks of the launch for `tiles` tiles under the tuning's grid policy.
int gridFor(uint64_t tiles, int resident, CopyTuning::Grid policy) {
  switch (policy) {
    case CopyTuning::Grid::kPerTile:
      return static_cast<int>(std::min<uint64_t>(tiles, 0x7fffffff));
    case CopyTuning::Grid::kBalanced: {
      const uint64_t rounds = (tiles + resident - 1) / resident;
      return static_cast<int>((tiles + rounds - 1) / rounds);
    }
    case CopyTuning::Grid::kResident:
      break;
  }
  return static_cast<int>(std::min<uint64_t>(tiles, resident));
}

template <typename Tin, typename Tout, bool kScale, bool kCheck, int kUnroll, bool kWide>
void launch(const CopyEntry* entries, int count, double scale, int* nan_flag, cudaStream_t stream,
            size_t elem_bytes, CopyTuning::Grid policy) {
  constexpr uint64_t kTileElems = uint64_t{kThreads} * kUnroll * stepElems<Tin, Tout, kWide>();
  for (int first = 0; first < count; first += kMaxEntriesPerLaunch) {
    const int n = std::min(kMaxEntriesPerLaunch, count - first);
    LaunchTable table;
    uint64_t tiles = 0;
    for (int i = 0; i < n; ++i) {
      const CopyEntry& e = entries[first + i];
      table.src[i] = e.src;
      table.dst[i] = e.dst;
      table.count[i] = e.count * elem_bytes;
      table.tag[i] = e.tag;
      table.tile_start[i] = static_cast<uint32_t>(tiles);
      tiles += (table.count[i] + kTileElems - 1) / kTileElems;
    }
    PERSEUS_CHECK(tiles < (uint64_t{1} << 31), "batched copy of " << tiles << " tiles");
    table.tile_start[n] = static_cast<uint32_t>(tiles);
    if (tiles == 0) continue;
    static std::atomic<int> cache[kMaxDevices];
    auto* kernel = &batchedCopyKernel<Tin, Tout, kScale, kCheck, kUnroll, kWide>;
    const int grid = gridFor(tiles, residentBlocks(kernel, cache), policy);
    kernel<<<grid, kThreads, 0, stream>>>(table, n, static_cast<typename Compute<Tin>::type>(scale),
                                          nan_flag);
    throwIfFailed(cudaGetLastError(), "batched copy kernel launch");
  }
}

template <typename Tin, typename Tout, int kUnroll, bool kWide = false>
void launchTyped(const CopyEntry* entries, int count, double scale, int* nan_flag,
                 cudaStream_t stream, CopyTuning::Grid g) {
  const bool do_scale = scale != 1.0;
  if (nan_flag != nullptr) {
    if (do_scale)
      launch<Tin, Tout, true, true, kUnroll, kWide>(entries, count, scale, nan_flag, stream, 1, g);
    else
      launch<Tin, Tout, false, true, kUnroll, kWide>(entries, count, scale, nan_flag, stream, 1, g);
  } else {
    if (do_scale)
      launch<Tin, Tout, true, false, kUnroll, kWide>(entries, count, scale, nullptr, stream, 1, g);
    else
      launch<Tin, Tout, false, false, kUnroll, kWide>(entries, count, scale, nullptr, stream, 1, g);
  }
}

template <typename T, int kUnroll>
void launchSameNoCheck(const CopyEntry* entries, int count, double scale, cudaStream_t stream,
                       CopyTuning::Grid g) {
  launch<T, T, true, false, kUnroll, false>(entries, count, scale, nullptr, stream, 1, g);
}

// A plain copy through the driver's copy (CopyTuning::Driver).
void driverCopy(const CopyEntry* entries, int count, size_t elem, cudaStream_t stream,
                CopyTuning::Driver how) {
#if CUDART_VERSION >= 13000
  if (how == CopyTuning::Driver::kMemcpyBatch && stream != nullptr) {
    std::vector<void*> dsts;
    std::vector<const void*> srcs;
    std::vector<size_t> sizes;
    for (int i = 0; i < count; ++i) {
      if (entries[i].count == 0) continue;
      dsts.push_back(entries[i].dst);
      srcs.push_back(entries[i].src);
      sizes.push_back(entries[i].count * elem);
    }
    cudaMemcpyAttributes attr{};
    attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    size_t attr_index = 0;
    // Batches of at most kMaxEntriesPerLaunch, like the kernel's tables.
    for (size_t first = 0; first < dsts.size(); first += kMaxEntriesPerLaunch) {
      const size_t n = std::min<size_t>(kMaxEntriesPerLaunch, dsts.size() - first);
      throwIfFailed(cudaMemcpyBatchAsync(dsts.data() + first, srcs.data() + first,
                                         sizes.data() + first, n, &attr, &attr_index, 1, stream),
                    "cudaMemcpyBatchAsync");
    }
    return;
  }
#endif
  (void)how;
  for (int i = 0; i < count; ++i) {
    if (entries[i].count == 0) continue;
    throwIfFailed(cudaMemcpyAsync(entries[i].dst, entries[i].src, entries[i].count * elem,
                                  cudaMemcpyDeviceToDevice, stream),
                  "cudaMemcpyAsync D2D");
  }
}

template <int kUnroll>
void dispatch(const CopyEntry* entries, int count, DataType src_type, DataType dst_type,
              double scale, int* nan_flag, cudaStream_t stream, const CopyTuning& t) {
  const CopyTuning::Grid g = t.grid;
  if (!isFloatingPoint(src_type)) nan_flag = nullptr;
  if (src_type == DataType::kBool) scale = 1.0;
  if (src_type == dst_type && scale == 1.0 && nan_flag == nullptr) {
    // A plain copy: move bytes, whatever the type.
    if (t.driver != CopyTuning::Driver::kKernel) {
      return driverCopy(entries, count, dataTypeSize(src_type), stream, t.driver);
    }
    launch<uint8_t, uint8_t, false, false, kUnroll, false>(entries, count, 1.0, nullptr, stream,
                                                           dataTypeSize(src_type), g);
    return;
  }
  if (src_type != dst_type) {
    if (src_type == DataType::kFloat32) {
      launchTyped<float, __half, kUnroll>(entries, count, scale, nan_flag, stream, g);
    } else if (t.wide_half_loads) {
      launchTyped<__half, float, kUnroll, true>(entries, count, scale, nan_flag, stream, g);
    } else {
      launchTyped<__half, float, kUnroll>(entries, count, scale, nan_flag, stream, g);
    }
    return;
  }
  switch (src_type) {
    case DataType::kFloat16:
      return launchTyped<__half, __half, kUnroll>(entries, count, scale, nan_flag, stream, g);
    case DataType::kBFloat16:
      return launchTyped<__nv_bfloat16, __nv_bfloat16, kUnroll>(entries, count, scale, nan_flag,
                                                                stream, g);
    case DataType::kFloat32:
      return launchTyped<float, float, kUnroll>(entries, count, scale, nan_flag, stream, g);
    case DataType::kFloat64:
      return launchTyped<double, double, kUnroll>(entries, count, scale, nan_flag, stream, g);
    case DataType::kUInt8:
      return launchSameNoCheck<uint8_t, kUnroll>(entries, count, scale, stream, g);
    case DataType::kInt8:
      return launchSameNoCheck<int8_t, kUnroll>(entries, count, scale, stream, g);
    case DataType::kInt32:
      return launchSameNoCheck<int32_t, kUnroll>(entries, count, scale, stream, g);
    case DataType::kInt64:
      return launchSameNoCheck<int64_t, kUnroll>(entries, count, scale, stream, g);
    case DataType::kBool:
      break;
  }
  PERSEUS_CHECK(false, "unreachable dtype " << dataTypeName(src_type));
}

}  // namespace

bool supportsCopy(DataType src_type, DataType dst_type) {
  if (src_type == dst_type) return true;
  return (src_type == DataType::kFloat32 && dst_type == DataType::kFloat16) ||
         (src_type == DataType::kFloat16 && dst_type == DataType::kFloat32);
}

CopyTuning defaultTuning(DataType src_type, DataType dst_type) {
  // One block per tile beat both persistent grids on every case (H200, gpu_fusion_bandwidth_test,
  // docs/perf/gpu.md): copy 93.6% of the device copy (89.1% persistent), scale 94.0%, casts to
  // float16 98.5%. float16->float32 reads half what it writes: 16-byte loads with pair-swapped
  // stores and unroll 8 measured 90.7% (8-byte loads, unroll 4: 90.4%).
  CopyTuning t;
  t.grid = CopyTuning::Grid::kPerTile;
  t.unroll = 4;
  if (src_type == DataType::kFloat16 && dst_type == DataType::kFloat32) {
    t.unroll = 8;
    t.wide_half_loads = true;
  }
  return t;
}

std::string tuningName(const CopyTuning& t) {
  if (t.driver == CopyTuning::Driver::kMemcpyEach) return "memcpy.each";
  if (t.driver == CopyTuning::Driver::kMemcpyBatch) return "memcpy.batch";
  std::string s = "u" + std::to_string(t.unroll);
  s += t.grid == CopyTuning::Grid::kResident   ? ".res"
       : t.grid == CopyTuning::Grid::kBalanced ? ".bal"
                                               : ".tile";
  if (t.wide_half_loads) s += ".wide";
  return s;
}

void batchedCopy(const CopyEntry* entries, int count, DataType src_type, DataType dst_type,
                 double scale, int* nan_flag, void* stream) {
  batchedCopyTuned(entries, count, src_type, dst_type, scale, nan_flag, stream,
                   defaultTuning(src_type, dst_type));
}

void batchedCopyUnrolled(const CopyEntry* entries, int count, DataType src_type, DataType dst_type,
                         double scale, int* nan_flag, void* stream, int unroll) {
  CopyTuning t = defaultTuning(src_type, dst_type);
  t.unroll = unroll;
  batchedCopyTuned(entries, count, src_type, dst_type, scale, nan_flag, stream, t);
}

void batchedCopyTuned(const CopyEntry* entries, int count, DataType src_type, DataType dst_type,
                      double scale, int* nan_flag, void* stream, const CopyTuning& tuning) {
  PERSEUS_CHECK(supportsCopy(src_type, dst_type),
                "no GPU copy from " << dataTypeName(src_type) << " to " << dataTypeName(dst_type));
  if (count <= 0) return;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (tuning.unroll == 4)
    return dispatch<4>(entries, count, src_type, dst_type, scale, nan_flag, s, tuning);
  if (tuning.unroll == 8)
    return dispatch<8>(entries, count, src_type, dst_type, scale, nan_flag, s, tuning);
  PERSEUS_CHECK(false, "unroll " << tuning.unroll << " is not 4 or 8");
}

}  // namespace perseus::kernels::cuda
