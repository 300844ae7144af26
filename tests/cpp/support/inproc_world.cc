#include "support/inproc_world.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

namespace perseus::testing {

Params InProcWorldOptions::defaultParams() {
  Params p;
  p.timeout_s = 20;
  p.tcp_chunk_bytes = 4096;  // small, so the pipelines really segment in tests
  return p;
}

InProcWorld::InProcWorld(InProcWorldOptions options) : options_(std::move(options)) {
  if (options_.host_of_rank.empty()) options_.host_of_rank.assign(options_.size, 0);
  fabric_ = std::make_shared<InProcFabric>(options_.size, options_.pair_capacity);
  for (int r = 0; r < options_.size; ++r) {
    transports_.push_back(std::make_unique<InProcTransport>(fabric_, r, options_.params));
  }
  std::map<int, std::vector<int>> ranks_of_host;
  for (int r = 0; r < options_.size; ++r) ranks_of_host[options_.host_of_rank[r]].push_back(r);
  host_and_local_.resize(options_.size);
  for (auto& [h, ranks] : ranks_of_host) {
    for (size_t i = 0; i < ranks.size(); ++i) {
      host_and_local_[ranks[i]] = {static_cast<int>(hosts_.size()), static_cast<int>(i)};
    }
    hosts_.push_back(
        std::make_unique<InProcArenaHost>(ranks, options_.slot_bytes, options_.params));
  }
}

InProcWorld::~InProcWorld() = default;

transport::ShmArena* InProcWorld::arena(int rank) {
  if (!options_.with_arena) return nullptr;
  auto [h, local] = host_and_local_[rank];
  return hosts_[h]->arena(local);
}

std::unique_ptr<collectives::Communicator> InProcWorld::makeComm(int rank, std::vector<int> members,
                                                                 int group_id) {
  std::vector<int> hosts;
  for (int m : members) hosts.push_back(options_.host_of_rank[m]);
  auto comm = std::make_unique<collectives::Communicator>(
      transport(rank), arena(rank), std::move(members), group_id, options_.params);
  comm->setHosts(std::move(hosts));
  return comm;
}

std::unique_ptr<collectives::Communicator> InProcWorld::makeWorldComm(int rank) {
  std::vector<int> all(options_.size);
  for (int r = 0; r < options_.size; ++r) all[r] = r;
  return makeComm(rank, all);
}

std::vector<std::string> InProcWorld::run(const std::function<void(int)>& body,
                                          std::chrono::milliseconds limit) {
  std::vector<std::string> errors(options_.size);
  std::mutex mutex;
  std::condition_variable done_cv;
  int done = 0;
  std::vector<std::thread> threads;
  for (int r = 0; r < options_.size; ++r) {
    threads.emplace_back([&, r] {
      std::string error;
      try {
        body(r);
      } catch (const std::exception& e) {
        error = e.what();
        if (error.empty()) error = "exception";
      }
      std::lock_guard<std::mutex> lock(mutex);
      errors[r] = error;
      ++done;
      done_cv.notify_all();
    });
  }
  bool timed_out = false;
  {
    std::unique_lock<std::mutex> lock(mutex);
    if (!done_cv.wait_for(lock, limit, [&] { return done == options_.size; })) {
      timed_out = true;
      for (auto& h : hosts_) h->abortAll("test deadline");
      fabric_->abortAll("test deadline");
    }
  }
  for (auto& t : threads) t.join();
  if (timed_out) {
    for (auto& e : errors) e = "timed out (hang): " + e;
  }
  return errors;
}

void InProcWorld::runOk(const std::function<void(int)>& body, std::chrono::milliseconds limit) {
  auto errors = run(body, limit);
  for (int r = 0; r < options_.size; ++r) {
    EXPECT_EQ(errors[r], "") << "rank " << r;
  }
}

}  // namespace perseus::testing
