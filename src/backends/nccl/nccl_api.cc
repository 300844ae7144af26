#include "backends/nccl/nccl_api.h"

#include <dlfcn.h>
#include <link.h>

#include <cstdlib>
#include <mutex>
#include <vector>

#include "common/logging.h"

namespace perseus::nccl {
namespace {

struct Loaded {
  NcclApi api;
  bool ok = false;
  std::string why;
  std::string path;
};

template <typename F>
bool resolve(void* lib, const char* name, F* out, std::string* why) {
  *out = reinterpret_cast<F>(dlsym(lib, name));
  if (*out == nullptr) *why = std::string("libnccl lacks ") + name;
  return *out != nullptr;
}

// Where libnccl.so.2 may be when PERSEUS_NCCL_LIBRARY names none and the process has loaded
// none yet, in the order tried: NCCL_HOME, the dynamic loader's own search (the system
// package, LD_LIBRARY_PATH), and last the nvidia-nccl-cu* wheel in the site-packages that
// holds this library (site-packages/nvidia/nccl/lib).
std::vector<std::string> candidates() {
  std::vector<std::string> out;
  if (const char* home = std::getenv("NCCL_HOME")) {
    if (*home != '\0') {
      out.push_back(std::string(home) + "/lib/libnccl.so.2");
      out.push_back(std::string(home) + "/lib64/libnccl.so.2");
    }
  }
  out.push_back("libnccl.so.2");
  out.push_back("libnccl.so");
  Dl_info self{};
  if (dladdr(reinterpret_cast<void*>(&candidates), &self) != 0 && self.dli_fname != nullptr) {
    std::string dir = self.dli_fname;
    dir = dir.substr(0, dir.find_last_of('/') + 1);  // .../site-packages/perseus/
    out.push_back(dir + "../nvidia/nccl/lib/libnccl.so.2");
  }
  return out;
}

std::string loadedPath(void* lib, const std::string& fallback) {
  link_map* map = nullptr;
  if (dlinfo(lib, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr &&
      *map->l_name != '\0') {
    return map->l_name;
  }
  return fallback;
}

// libnccl.so.2, or nullptr (then *why says why). An explicit choice wins. Otherwise a copy the
// process already loaded (PyTorch loads the one of its wheel) comes first: two NCCLs in one
// process would not share their state.
void* openNccl(std::string* why) {
  const char* explicit_path = std::getenv("PERSEUS_NCCL_LIBRARY");
  if (explicit_path != nullptr && *explicit_path != '\0') {
    void* lib = dlopen(explicit_path, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* err = dlerror();
      *why = std::string("PERSEUS_NCCL_LIBRARY=") + explicit_path +
             " cannot be loaded: " + (err ? err : "not found");
    }
    return lib;
  }
  for (const char* name : {"libnccl.so.2", "libnccl.so"}) {
    if (void* lib = dlopen(name, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD)) return lib;
  }
  std::string tried;
  for (const std::string& path : candidates()) {
    if (void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return lib;
    const char* err = dlerror();
    tried += "\n  " + path + ": " + (err ? err : "not found");
  }
  *why = "cannot load libnccl.so.2; tried:" + tried +
         "\nInstall NCCL (the system package, or pip install nvidia-nccl-cu12/13), or point "
         "PERSEUS_NCCL_LIBRARY at libnccl.so.2";
  return nullptr;
}

// Fills every entry point of `a` from `lib`; false (and *why) at the first one missing.
bool resolveAll(void* lib, NcclApi* a, std::string* why) {
  bool ok = true;
  auto need = [&](const char* name, auto* out) { ok = ok && resolve(lib, name, out, why); };
  need("ncclGetVersion", &a->getVersion);
  need("ncclGetUniqueId", &a->getUniqueId);
  need("ncclCommInitRankConfig", &a->commInitRankConfig);
  need("ncclCommSplit", &a->commSplit);
  need("ncclCommAbort", &a->commAbort);
  need("ncclCommDestroy", &a->commDestroy);
  need("ncclCommGetAsyncError", &a->commGetAsyncError);
  need("ncclCommUserRank", &a->commUserRank);
  need("ncclCommCount", &a->commCount);
  need("ncclGetErrorString", &a->getErrorString);
  need("ncclGetLastError", &a->getLastError);
  need("ncclAllReduce", &a->allReduce);
  need("ncclAllGather", &a->allGather);
  need("ncclBroadcast", &a->broadcast);
  need("ncclReduce", &a->reduce);
  need("ncclReduceScatter", &a->reduceScatter);
  need("ncclSend", &a->send);
  need("ncclRecv", &a->recv);
  need("ncclGroupStart", &a->groupStart);
  need("ncclGroupEnd", &a->groupEnd);
  return ok;
}

Loaded load() {
  Loaded l;
  void* lib = openNccl(&l.why);
  if (lib == nullptr) return l;
  l.path = loadedPath(lib, "libnccl.so.2");
  NcclApi& a = l.api;
  l.ok = resolveAll(lib, &a, &l.why);
  if (l.ok && a.getVersion(&a.version) != ncclSuccess) a.version = 0;
  // Non-blocking communicators and ncclCommSplit need 2.14+; older NCCL is treated as absent.
  if (l.ok && a.version < 21400) {
    l.ok = false;
    l.why = "libnccl at " + l.path + " is version " + std::to_string(a.version) +
            "; Perseus needs NCCL >= 2.14";
  }
  return l;
}

}  // namespace

namespace {

const Loaded& loadedOnce() {
  static std::once_flag once;
  static Loaded loaded;
  std::call_once(once, [] {
    loaded = load();
    if (!loaded.ok) {
      PERSEUS_LOG(WARNING, kCuda) << "NCCL unavailable, CUDA tensors use the host-staged path: "
                                  << loaded.why;
    } else {
      PERSEUS_LOG(INFO, kCuda) << "NCCL " << versionText(loaded.api.version) << " loaded from "
                               << loaded.path;
    }
  });
  return loaded;
}

}  // namespace

const NcclApi* ncclApi(std::string* why) {
  const Loaded& loaded = loadedOnce();
  if (!loaded.ok && why != nullptr) *why = loaded.why;
  return loaded.ok ? &loaded.api : nullptr;
}

std::string ncclLoadReport() {
  const Loaded& loaded = loadedOnce();
  if (!loaded.ok) return "nccl_loaded=0 nccl_error=" + loaded.why;
  return "nccl_loaded=1 nccl_version=" + std::to_string(loaded.api.version) +
         " nccl_path=" + loaded.path;
}

std::string versionText(int code) {
  // NCCL >= 2.9 encodes X.Y.Z as X*10000 + Y*100 + Z; earlier releases as X*1000 + Y*100 + Z.
  const int major = code >= 10000 ? code / 10000 : code / 1000;
  const int rest = code >= 10000 ? code % 10000 : code % 1000;
  return std::to_string(major) + "." + std::to_string(rest / 100) + "." +
         std::to_string(rest % 100);
}

}  // namespace perseus::nccl
