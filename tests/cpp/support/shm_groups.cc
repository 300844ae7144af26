#include "support/shm_groups.h"

#include <exception>
#include <mutex>
#include <thread>

#include "support/shared_barrier.h"

namespace perseus::testing {

std::vector<std::unique_ptr<transport::shm::ShmLocalGroup>> createShmGroupsAsThreads(
    int n, const std::string& job_id, const Params& params) {
  SharedBarrier barrier(n);
  std::vector<int> ranks(n);
  for (int i = 0; i < n; ++i) ranks[i] = i;
  std::vector<std::unique_ptr<transport::shm::ShmLocalGroup>> groups(n);
  std::exception_ptr error;
  std::mutex mutex;
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      try {
        groups[i] =
            transport::shm::createShmLocalGroup(job_id, i, ranks, params, [&] { barrier.wait(); });
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!error) error = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);
  return groups;
}

std::unique_ptr<transport::ChannelTransport> makeShmTransport(transport::shm::ShmLocalGroup& group,
                                                              int rank, int size,
                                                              const Params& params) {
  std::vector<std::unique_ptr<transport::Channel>> channels(size);
  for (auto& [peer, channel] : group.channels) channels.at(peer) = std::move(channel);
  return std::make_unique<transport::ChannelTransport>(rank, std::move(channels), params,
                                                       group.doorbell);
}

std::vector<std::string> runOnShmCommunicators(
    int n, const std::string& job_id, const Params& params,
    const std::function<void(int, collectives::Communicator&)>& body) {
  auto groups = createShmGroupsAsThreads(n, job_id, params);
  std::vector<std::unique_ptr<transport::ChannelTransport>> tps;
  for (int r = 0; r < n; ++r) tps.push_back(makeShmTransport(*groups[r], r, n, params));
  std::vector<int> members(n);
  for (int r = 0; r < n; ++r) members[r] = r;
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        collectives::Communicator comm(tps[r].get(), groups[r]->arena.get(), members, 0, params);
        body(r, comm);
      } catch (const std::exception& e) {
        errors[r] = e.what();
        tps[r]->abort(e.what());
        groups[r]->arena->abort(e.what());
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

Params shmTestParams() {
  Params p;
  p.timeout_s = 10;
  p.shm_ring_bytes = 64 << 10;
  p.shm_slot_bytes = 64 << 10;
  p.spin_us = 50;
  return p;
}

}  // namespace perseus::testing
