// GPU kernels of the fusion path: one launch copies many tensors (a pointer/size table) into or
// out of a fusion buffer, with a scale factor, an fp32<->fp16 cast and a NaN/Inf check fused
// into the same pass over the bytes. Plain C++ interface (no CUDA types), so that host code
// compiled by g++ can call it; the implementation is fusion_kernels.cu.
//
// Contract: every call only enqueues work on `stream` (a cudaStream_t; nullptr is the legacy
// default stream) of the current device; nothing blocks the host. Pointers are device pointers
// (or pointers the device can reach). Errors of the launch throw InternalError.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/dtype.h"

namespace perseus::kernels::cuda {

// One tensor (or a slice of one) of a batched copy: `count` elements from src to dst.
// src == dst is allowed (an in-place scale or check); other overlaps are not.
struct CopyEntry {
  const void* src;
  void* dst;
  uint64_t count;
  int tag = 0;  // reported through nan_flag (the index of the tensor this slice belongs to)
};

// Tensors per launch: the table travels as a kernel parameter (under the 4 KiB limit), so a
// launch needs no host-to-device copy of its own. Longer tables take several launches.
constexpr int kMaxEntriesPerLaunch = 120;

// True when batchedCopy() converts src_type to dst_type: equal types, float32->float16 and
// float16->float32.
bool supportsCopy(DataType src_type, DataType dst_type);

// dst[i] = dst_type(src[i] * scale) for every entry. scale == 1 is an exact copy (bit for bit
// when the types are equal). Integer types scale in double and truncate toward zero, as the
// CPU kernels (kernels/reduce.h) do; bool is copied, never scaled.
//
// nan_flag: null, or a device int that starts above any tag; for each entry whose source holds
// a NaN or +-Inf (floating types), the kernel lowers *nan_flag to at most that entry's tag.
// So after the stream passes this point, *nan_flag is the lowest such tag of the batch.
void batchedCopy(const CopyEntry* entries, int count, DataType src_type, DataType dst_type,
                 double scale, int* nan_flag, void* stream);

// How a batched copy runs: the variants the bandwidth test (gpu_fusion_bandwidth_test) times
// against each other in one device call. batchedCopy() uses the defaults below.
struct CopyTuning {
  // Vector accesses in flight per thread before the first store: 4 or 8.
  int unroll = 8;
  enum class Grid {
    kResident,  // a persistent grid of exactly as many blocks as fit at once (occupancy API)
    kBalanced,  // persistent, but the same number of tiles per block (no half-empty last round)
    kPerTile,   // one block per tile: the hardware scheduler balances the tail
  };
  Grid grid = Grid::kResident;
  // float16->float32 only: false = 8-byte loads, 16-byte stores; true = 16-byte loads, and
  // the two 16-byte stores of a thread pair swapped through a warp shuffle so that each store
  // instruction writes whole 32-byte sectors.
  bool wide_half_loads = false;
  // A plain copy (equal types, no scale, no check) by the driver instead of the kernel:
  // kKernel, one cudaMemcpyAsync per tensor, or one cudaMemcpyBatchAsync (CUDA >= 13; on the
  // legacy default stream, where the batch call is not allowed, per-tensor copies instead).
  enum class Driver { kKernel, kMemcpyEach, kMemcpyBatch };
  Driver driver = Driver::kKernel;
};

// The shipped tuning for (src_type, dst_type): float16->float32 with unroll 4 (its measured
// best), everything else CopyTuning{}.
CopyTuning defaultTuning(DataType src_type, DataType dst_type);

constexpr int kDefaultUnroll = 8;
void batchedCopyTuned(const CopyEntry* entries, int count, DataType src_type, DataType dst_type,
                      double scale, int* nan_flag, void* stream, const CopyTuning& tuning);
// defaultTuning() with another unroll (kept for the tests of both unrolls).
void batchedCopyUnrolled(const CopyEntry* entries, int count, DataType src_type, DataType dst_type,
                         double scale, int* nan_flag, void* stream, int unroll);

// Short name of a tuning for tables ("u8.res", "u4.tile.wide", "memcpy.batch").
std::string tuningName(const CopyTuning& t);

}  // namespace perseus::kernels::cuda
