// perseus_init/shutdown, topology, build info, settings dump, last error, store server.
#include "capi/runtime.h"

#include <sstream>
#include <string>

#include "backends/gpu_backend.h"
#include "common/logging.h"
#include "rendezvous/tcp_store_server.h"

namespace perseus::capi {

Runtime& runtime() {
  static Runtime* r = new Runtime();  // never destroyed: C callers may run during exit
  return *r;
}

namespace {
thread_local std::string t_last_error;
thread_local std::string t_params_dump;
thread_local std::string t_runtime_info;
}  // namespace

void setLastError(const std::string& message) { t_last_error = message; }

std::shared_ptr<engine::Engine> requireEngine() {
  Runtime& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mu);
  if (rt.engine) return rt.engine;
  if (rt.shut_down) {
    throw ShutDownError(
        "Perseus has been shut down (perseus_shutdown); call perseus_init() again "
        "to start a new job");
  }
  throw NotInitializedError(
      "Perseus has not been initialized; call perseus_init() (hvd.init()) first");
}

void streamWait(engine::Engine* engine, engine::Handle& handle, void* stream) {
  const int64_t spin_us = runtime().spin_us.load(std::memory_order_relaxed);
  if (engine != nullptr && !handle.streamReady()) {
    engine->streamWait(handle, stream, spin_us);
  } else {
    handle.streamWait(stream, spin_us);
  }
}

perseus_handle publish(const std::shared_ptr<engine::Handle>& handle) {
  runtime().handles.insert(handle);
  return handle->id();
}

std::shared_ptr<engine::Handle> findHandle(perseus_handle id) {
  auto h = runtime().handles.find(id);
  if (!h) {
    throw InvalidArgumentError(PERSEUS_STR("handle " << id << " is unknown or already released"));
  }
  return h;
}

}  // namespace perseus::capi

using namespace perseus;
using perseus::capi::guarded;
using perseus::capi::runtime;

extern "C" {

perseus_status perseus_init(void) {
  return guarded([] {
    auto& rt = runtime();
    std::lock_guard<std::mutex> lock(rt.mu);
    if (rt.engine) return;
    Params params = Params::fromEnvironment();
    logging::setMinLevel(logging::parseLevel(params.log_level));
    auto world = rendezvous::bootstrap(params);
    logging::setRank(world->topology.rank);
    rt.engine = std::make_shared<engine::Engine>(world->topology, world->transport.get(),
                                                 world->arena.get(), params);
    rt.world = std::move(world);
    rt.spin_us = params.spin_us;
    rt.shut_down = false;
  });
}

perseus_status perseus_shutdown(void) {
  return guarded([] {
    auto& rt = runtime();
    std::lock_guard<std::mutex> lock(rt.mu);
    if (!rt.engine) return;
    rt.engine->shutdown();
    // Framework threads may still hold the engine (a submission in progress); it is destroyed
    // with the last reference, after which the world's transports go.
    rt.engine.reset();
    rt.world.reset();
    rt.shut_down = true;
  });
}

int perseus_is_initialized(void) {
  auto& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mu);
  return rt.engine ? 1 : 0;
}

perseus_status perseus_get_topology(perseus_topology* out) {
  return guarded([&] {
    if (out == nullptr) throw InvalidArgumentError("perseus_get_topology: out is NULL");
    auto e = capi::requireEngine();
    const auto& t = e->topology();
    *out = perseus_topology{t.rank, t.size, t.local_rank, t.local_size, t.cross_rank, t.cross_size};
  });
}

perseus_status perseus_get_engine_stats(perseus_engine_stats* out) {
  return guarded([&] {
    if (out == nullptr) throw InvalidArgumentError("perseus_get_engine_stats: out is NULL");
    const engine::Engine::Stats s = capi::requireEngine()->stats();
    *out = perseus_engine_stats{s.cycles,
                                s.control_exchanges,
                                s.control_bytes,
                                s.coordinator_rounds,
                                s.cached_responses,
                                s.coordinated_responses,
                                s.negotiation_ns,
                                s.posted_allreduces,
                                s.posted_collectives};
  });
}

perseus_status perseus_start_timeline(const char* path, int mark_cycles) {
  return guarded([&] {
    if (path == nullptr || *path == '\0') {
      throw InvalidArgumentError("perseus_start_timeline: give a file path");
    }
    capi::requireEngine()->startTimeline(path, mark_cycles != 0);
  });
}

perseus_status perseus_stop_timeline(void) {
  return guarded([] { capi::requireEngine()->stopTimeline(); });
}

const char* perseus_last_error(void) { return capi::t_last_error.c_str(); }

const char* perseus_build_info(void) {
#ifdef PERSEUS_HAVE_MPI
  constexpr int kMpiBuilt = 1;
#else
  constexpr int kMpiBuilt = 0;
#endif
  static const std::string info = [] {
    std::ostringstream os;
    os << "cpu=1 cuda=" << (backends::gpuBuildEnabled() ? 1 : 0)
       << " nccl=" << backends::ncclHeaderVersion() << " mpi=" << kMpiBuilt
       << " version=" PERSEUS_VERSION;
#ifdef PERSEUS_CUDA_ARCHS
    os << " cuda_archs=" PERSEUS_CUDA_ARCHS;
#endif
    return os.str();
  }();
  return info.c_str();
}

const char* perseus_runtime_info(void) {
  try {
    capi::t_runtime_info = backends::gpuRuntimeReport();
  } catch (const std::exception& e) {
    capi::t_runtime_info = std::string("error=") + e.what();
  }
  return capi::t_runtime_info.c_str();
}

const char* perseus_params_dump(void) {
  try {
    std::ostringstream os;
    for (const auto& e : Params::fromEnvironment().describe()) {
      os << e.variable << "=" << e.value << "\t" << e.default_value << "\t" << e.description
         << "\n";
    }
    capi::t_params_dump = os.str();
  } catch (const std::exception& e) {
    capi::t_params_dump = std::string("error: ") + e.what() + "\n";
  }
  return capi::t_params_dump.c_str();
}

perseus_status perseus_store_server_start(const char* bind_address, int32_t port,
                                          const char* secret, int32_t* bound_port, void** server) {
  return guarded([&] {
    if (secret == nullptr || server == nullptr) {
      throw InvalidArgumentError("perseus_store_server_start: secret and server must not be NULL");
    }
    if (port < 0 || port > 65535) {
      throw InvalidArgumentError(
          PERSEUS_STR("perseus_store_server_start: port " << port << " is not in [0, 65535]"));
    }
    auto s =
        rendezvous::TcpStoreServer::start(bind_address ? bind_address : "0.0.0.0", port, secret);
    if (bound_port) *bound_port = s->port();
    *server = s.release();
  });
}

perseus_status perseus_store_server_stop(void* server) {
  return guarded([&] {
    if (server == nullptr) throw InvalidArgumentError("perseus_store_server_stop: server is NULL");
    delete static_cast<rendezvous::TcpStoreServer*>(server);
  });
}

}  // extern "C"
