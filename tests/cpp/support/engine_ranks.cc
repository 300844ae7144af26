#include "support/engine_ranks.h"

#include <unistd.h>

#include <atomic>
#include <exception>
#include <mutex>
#include <string>
#include <thread>

#include "support/shm_groups.h"

namespace perseus::testing {

Params engineTestParams() {
  Params p = shmTestParams();
  p.timeout_s = 10;
  return p;
}

EngineRanks::EngineRanks(int n, const Params& params)
    : EngineRanks(n, params, [](int, Params&) {}) {}

EngineRanks::EngineRanks(int n, const Params& params,
                         const std::function<void(int, Params&)>& per_rank) {
  static std::atomic<int> counter{0};
  std::string job = "engt" + std::to_string(getpid()) + "x" + std::to_string(counter++);
  groups_ = createShmGroupsAsThreads(n, job, params);
  for (int r = 0; r < n; ++r) transports_.push_back(makeShmTransport(*groups_[r], r, n, params));
  for (int r = 0; r < n; ++r) {
    rendezvous::Topology topo;
    topo.rank = r;
    topo.size = n;
    topo.local_rank = r;
    topo.local_size = n;
    Params mine = params;
    per_rank(r, mine);
    engines_.push_back(std::make_unique<engine::Engine>(topo, transports_[r].get(),
                                                        groups_[r]->arena.get(), mine));
  }
}

EngineRanks::~EngineRanks() { shutdownAll(); }

void EngineRanks::shutdownAll() {
  // Engines stop together (one rank's shutdown reaches all); join them in parallel anyway so
  // that a broken engine does not serialise the waits.
  std::vector<std::thread> threads;
  for (auto& e : engines_) threads.emplace_back([&e] { e->shutdown(); });
  for (auto& t : threads) t.join();
}

void EngineRanks::run(const std::function<void(int, engine::Engine&)>& body) {
  std::exception_ptr error;
  std::mutex mutex;
  std::vector<std::thread> threads;
  for (int r = 0; r < size(); ++r) {
    threads.emplace_back([&, r] {
      try {
        body(r, *engines_[r]);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!error) error = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace perseus::testing
