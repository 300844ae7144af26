// Test helper: a one-host job of n ranks as threads, each with its own shared-memory
// transport and its own engine::Engine (no globals), for multi-rank engine tests.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "common/params.h"
#include "engine/engine.h"
#include "transport/channel_transport.h"
#include "transport/shm/shm_local_group.h"

namespace perseus::testing {

class EngineRanks {
 public:
  EngineRanks(int n, const Params& params);
  // Rank r's engine gets `params` as changed by per_rank(r, params) (the transports share them).
  EngineRanks(int n, const Params& params, const std::function<void(int, Params&)>& per_rank);
  ~EngineRanks();  // shuts every engine down, then the transports

  int size() const { return static_cast<int>(engines_.size()); }
  engine::Engine& engine(int rank) { return *engines_.at(rank); }
  // Runs body(rank, engine) on one thread per rank and rethrows the first exception.
  void run(const std::function<void(int, engine::Engine&)>& body);
  void shutdownAll();

 private:
  std::vector<std::unique_ptr<transport::shm::ShmLocalGroup>> groups_;
  std::vector<std::unique_ptr<transport::ChannelTransport>> transports_;
  std::vector<std::unique_ptr<engine::Engine>> engines_;
};

// Engine test defaults: shmTestParams() plus a short stall warning.
Params engineTestParams();

}  // namespace perseus::testing
