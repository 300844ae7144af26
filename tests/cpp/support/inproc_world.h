// TEST SUPPORT ONLY. A job of `size` ranks as threads in this process: an in-process transport
// (inproc_transport.h) and one in-process arena per simulated host (inproc_arena.h). run()
// bounds every test: at the deadline it aborts the transports and arenas so blocked ranks
// return, and reports the hang as a failure instead of blocking the test binary.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "common/params.h"
#include "support/inproc_arena.h"
#include "support/inproc_transport.h"

namespace perseus::testing {

struct InProcWorldOptions {
  int size = 2;
  // Host index of each rank; empty = all on one host. Ranks of a host share one arena.
  std::vector<int> host_of_rank;
  bool with_arena = true;
  size_t slot_bytes = 64 * 1024;
  size_t pair_capacity = InProcFabric::kDefaultCapacity;
  Params params = defaultParams();
  static Params defaultParams();
};

class InProcWorld {
 public:
  explicit InProcWorld(InProcWorldOptions options);
  ~InProcWorld();

  int size() const { return options_.size; }
  const Params& params() const { return options_.params; }
  transport::Transport* transport(int rank) { return transports_[rank].get(); }
  transport::ShmArena* arena(int rank);  // null without arenas
  // A communicator for `rank` over `members` (global ranks), with hosts set when the world
  // spans several hosts.
  std::unique_ptr<collectives::Communicator> makeComm(int rank, std::vector<int> members,
                                                      int group_id = 0);
  std::unique_ptr<collectives::Communicator> makeWorldComm(int rank);

  // Runs body(rank) on size() threads. Returns each rank's error message ("" when it
  // succeeded); a rank still running at `limit` gets "timed out".
  std::vector<std::string> run(const std::function<void(int rank)>& body,
                               std::chrono::milliseconds limit = std::chrono::seconds(60));
  // run() and fail the current test with every rank's error.
  void runOk(const std::function<void(int rank)>& body,
             std::chrono::milliseconds limit = std::chrono::seconds(60));

 private:
  InProcWorldOptions options_;
  std::shared_ptr<InProcFabric> fabric_;
  std::vector<std::unique_ptr<InProcTransport>> transports_;
  std::vector<std::unique_ptr<InProcArenaHost>> hosts_;
  std::vector<std::pair<int, int>> host_and_local_;  // per rank
};

}  // namespace perseus::testing
