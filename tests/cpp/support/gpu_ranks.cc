#include "support/gpu_ranks.h"

#if PERSEUS_HAVE_CUDA
#include <cuda_runtime.h>
#include <unistd.h>

#include <exception>
#include <mutex>
#include <thread>

#include "support/shm_groups.h"

namespace perseus::testing {

World1::World1(const std::string& name) : params(shmTestParams()) {
  params.timeout_s = 20;
  groups = createShmGroupsAsThreads(1, name + std::to_string(getpid()), params);
  transport = makeShmTransport(*groups[0], 0, 1, params);
  comm = std::make_unique<collectives::Communicator>(transport.get(), groups[0]->arena.get(),
                                                     std::vector<int>{0}, 0, params);
}

std::unique_ptr<backends::GpuBackend> World1::backend(const Params& p) {
  backends::GpuBackendOptions o;
  o.params = p;
  return backends::createGpuBackend(o);
}

void runTwoRanksOnOneGpu(
    const std::string& name, Params params,
    const std::function<void(int, collectives::Communicator&, backends::GpuBackend&)>& body) {
  auto groups = createShmGroupsAsThreads(2, name + std::to_string(getpid()), params);
  std::vector<std::unique_ptr<transport::ChannelTransport>> transports;
  for (int r = 0; r < 2; ++r) transports.push_back(makeShmTransport(*groups[r], r, 2, params));
  std::exception_ptr error;
  std::mutex mutex;
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      try {
        cudaSetDevice(0);
        collectives::Communicator comm(transports[r].get(), groups[r]->arena.get(), {0, 1}, 0,
                                       params);
        backends::GpuBackendOptions o;
        o.params = params;
        o.rank = r;
        o.hostnames = {"host", "host"};
        auto backend = backends::createGpuBackend(o);
        body(r, comm, *backend);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!error) error = std::current_exception();
        for (auto& t : transports) t->abort("a rank failed");
      }
    });
  }
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace perseus::testing
#endif
