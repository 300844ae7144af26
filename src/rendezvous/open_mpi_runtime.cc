#include "rendezvous/open_mpi_runtime.h"

#include <dlfcn.h>

#include <cstring>
#include <vector>

#include "common/status.h"

// Note [Open MPI at run time]
// Open MPI's handles are pointers to its predefined objects: MPI_COMM_WORLD is
// &ompi_mpi_comm_world and MPI_CHAR is &ompi_mpi_char (ompi/include/mpi.h), so their
// addresses from dlsym are the handles themselves, and no header is needed. libmpi is opened
// RTLD_GLOBAL because Open MPI's own plugins, which it dlopens, resolve symbols of libmpi
// through the global scope. The soname libmpi.so.40 is that of Open MPI 3.0 to 5.x.

namespace perseus::rendezvous {
namespace {

using Handle = void*;
using InitializedFn = int (*)(int*);
using FinalizedFn = int (*)(int*);
using InitThreadFn = int (*)(int*, char***, int, int*);
using BcastFn = int (*)(void*, int, Handle, int, Handle);
using FinalizeFn = int (*)();

constexpr int kMpiThreadMultiple = 3;  // Open MPI's MPI_THREAD_MULTIPLE
constexpr int kMessageBytes = 512;

void* openLibmpi() {
  std::string errors;
  for (const char* name : {"libmpi.so.40", "libmpi.so"}) {
    if (void* lib = ::dlopen(name, RTLD_NOW | RTLD_GLOBAL)) return lib;
    errors += std::string(errors.empty() ? "" : "; ") + ::dlerror();
  }
  throw InvalidArgumentError(
      "this Open MPI job spans several hosts (or OMPI_COMM_WORLD_LOCAL_SIZE is not set), so "
      "the ranks share the rendezvous store's address through MPI, but Open MPI's libmpi "
      "could not be loaded (" +
      errors +
      "); put Open MPI's lib directory on "
      "LD_LIBRARY_PATH (mpirun -x LD_LIBRARY_PATH), launch with perseusrun or perseusrun --mpi, "
      "or set PERSEUS_CONTROLLER_ADDR/_PORT and PERSEUS_SECRET to a store started with "
      "perseus_store_server_start");
}

template <typename T>
T symbol(void* lib, const char* name) {
  void* p = ::dlsym(lib, name);
  if (p == nullptr) {
    throw InvalidArgumentError(PERSEUS_STR("libmpi has no "
                                           << name << " (" << ::dlerror()
                                           << "); is it Open MPI's? Launch with perseusrun"));
  }
  return reinterpret_cast<T>(p);
}

void check(int rc, const char* call) {
  if (rc != 0) throw InternalError(PERSEUS_STR(call << " failed with MPI error " << rc));
}

}  // namespace

std::string openMpiBroadcast(const std::string& message, bool keep_mpi) {
  void* lib = openLibmpi();  // never closed: MPI may stay in use
  auto initialized_fn = symbol<InitializedFn>(lib, "MPI_Initialized");
  auto finalized_fn = symbol<FinalizedFn>(lib, "MPI_Finalized");
  auto init_thread = symbol<InitThreadFn>(lib, "MPI_Init_thread");
  auto bcast = symbol<BcastFn>(lib, "MPI_Bcast");
  auto finalize = symbol<FinalizeFn>(lib, "MPI_Finalize");
  Handle comm_world = symbol<Handle>(lib, "ompi_mpi_comm_world");
  Handle mpi_char = symbol<Handle>(lib, "ompi_mpi_char");

  int initialized = 0, finalized = 0;
  check(initialized_fn(&initialized), "MPI_Initialized");
  check(finalized_fn(&finalized), "MPI_Finalized");
  if (finalized) {
    throw UnsupportedError(
        "MPI was already finalised in this process, and the ranks of this multi-host mpirun "
        "job share the store's address through MPI; call hvd.init() before MPI_Finalize, or "
        "launch with perseusrun");
  }
  if (!initialized) {
    int provided = 0;
    check(init_thread(nullptr, nullptr, kMpiThreadMultiple, &provided), "MPI_Init_thread");
  }
  std::vector<char> buf(kMessageBytes, '\0');
  if (message.size() >= buf.size()) throw InternalError("store address too long for MPI_Bcast");
  std::memcpy(buf.data(), message.data(), message.size());
  check(bcast(buf.data(), kMessageBytes, mpi_char, 0, comm_world), "MPI_Bcast");
  if (!initialized && !keep_mpi) check(finalize(), "MPI_Finalize");
  return std::string(buf.data());
}

}  // namespace perseus::rendezvous
