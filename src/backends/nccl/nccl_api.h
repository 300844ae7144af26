// NCCL, loaded on first use with dlopen so that libperseus itself does not depend on
// libnccl.so (a CPU-only machine needs neither NCCL nor a driver). The table holds the entry
// points the backend calls; the types come from the nccl.h that the build saw.
#pragma once

#include <nccl.h>

#include <string>

namespace perseus::nccl {

struct NcclApi {
  decltype(&::ncclGetVersion) getVersion;
  decltype(&::ncclGetUniqueId) getUniqueId;
  decltype(&::ncclCommInitRankConfig) commInitRankConfig;
  decltype(&::ncclCommSplit) commSplit;
  decltype(&::ncclCommAbort) commAbort;
  decltype(&::ncclCommDestroy) commDestroy;
  decltype(&::ncclCommGetAsyncError) commGetAsyncError;
  decltype(&::ncclCommUserRank) commUserRank;
  decltype(&::ncclCommCount) commCount;
  decltype(&::ncclGetErrorString) getErrorString;
  decltype(&::ncclGetLastError) getLastError;
  decltype(&::ncclAllReduce) allReduce;
  decltype(&::ncclAllGather) allGather;
  decltype(&::ncclBroadcast) broadcast;
  decltype(&::ncclReduce) reduce;
  decltype(&::ncclReduceScatter) reduceScatter;
  decltype(&::ncclSend) send;
  decltype(&::ncclRecv) recv;
  decltype(&::ncclGroupStart) groupStart;
  decltype(&::ncclGroupEnd) groupEnd;
  int version = 0;  // e.g. 22805
};

// The loaded table, or nullptr when libnccl.so.2 cannot be loaded (then *why says why).
// Thread-safe; loads once per process.
const NcclApi* ncclApi(std::string* why = nullptr);

// "nccl_loaded=1 nccl_version=22809 nccl_path=/...", or "nccl_loaded=0 nccl_error=..." (the
// error runs to the end). Loads NCCL if nothing did yet.
std::string ncclLoadReport();

// 22809 -> "2.28.9".
std::string versionText(int code);

}  // namespace perseus::nccl
