#include "backends/nccl/nccl_api.h"

#include <dlfcn.h>

#include <mutex>

#include "common/logging.h"

namespace perseus::nccl {
namespace {

struct Loaded {
  NcclApi api;
  bool ok = false;
  std::string why;
};

template <typename F>
bool resolve(void* lib, const char* name, F* out, std::string* why) {
  *out = reinterpret_cast<F>(dlsym(lib, name));
  if (*out == nullptr) *why = std::string("libnccl lacks ") + name;
  return *out != nullptr;
}

Loaded load() {
  Loaded l;
  // The soname first: a process that already loaded NCCL (PyTorch does) reuses that copy.
  void* lib = nullptr;
  for (const char* name : {"libnccl.so.2", "libnccl.so"}) {
    lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) break;
  }
  if (lib == nullptr) {
    const char* err = dlerror();
    l.why = std::string("cannot load libnccl.so.2 (") + (err ? err : "not found") +
            "); install NCCL or add its folder to LD_LIBRARY_PATH";
    return l;
  }
  NcclApi& a = l.api;
  std::string& w = l.why;
  l.ok = resolve(lib, "ncclGetVersion", &a.getVersion, &w) &&
         resolve(lib, "ncclGetUniqueId", &a.getUniqueId, &w) &&
         resolve(lib, "ncclCommInitRankConfig", &a.commInitRankConfig, &w) &&
         resolve(lib, "ncclCommSplit", &a.commSplit, &w) &&
         resolve(lib, "ncclCommAbort", &a.commAbort, &w) &&
         resolve(lib, "ncclCommDestroy", &a.commDestroy, &w) &&
         resolve(lib, "ncclCommGetAsyncError", &a.commGetAsyncError, &w) &&
         resolve(lib, "ncclCommUserRank", &a.commUserRank, &w) &&
         resolve(lib, "ncclCommCount", &a.commCount, &w) &&
         resolve(lib, "ncclGetErrorString", &a.getErrorString, &w) &&
         resolve(lib, "ncclGetLastError", &a.getLastError, &w) &&
         resolve(lib, "ncclAllReduce", &a.allReduce, &w) &&
         resolve(lib, "ncclAllGather", &a.allGather, &w) &&
         resolve(lib, "ncclBroadcast", &a.broadcast, &w) &&
         resolve(lib, "ncclReduce", &a.reduce, &w) &&
         resolve(lib, "ncclReduceScatter", &a.reduceScatter, &w) &&
         resolve(lib, "ncclSend", &a.send, &w) && resolve(lib, "ncclRecv", &a.recv, &w) &&
         resolve(lib, "ncclGroupStart", &a.groupStart, &w) &&
         resolve(lib, "ncclGroupEnd", &a.groupEnd, &w);
  if (l.ok && a.getVersion(&a.version) != ncclSuccess) a.version = 0;
  // Non-blocking communicators and ncclCommSplit need 2.14+; older NCCL is treated as absent.
  if (l.ok && a.version < 21400) {
    l.ok = false;
    l.why = "libnccl is version " + std::to_string(a.version) + "; Perseus needs NCCL >= 2.14";
  }
  return l;
}

}  // namespace

const NcclApi* ncclApi(std::string* why) {
  static std::once_flag once;
  static Loaded loaded;
  std::call_once(once, [] {
    loaded = load();
    if (!loaded.ok) {
      PERSEUS_LOG(WARNING, kCuda) << "NCCL unavailable, CUDA tensors use the host-staged path: "
                                  << loaded.why;
    }
  });
  if (!loaded.ok && why != nullptr) *why = loaded.why;
  return loaded.ok ? &loaded.api : nullptr;
}

}  // namespace perseus::nccl
