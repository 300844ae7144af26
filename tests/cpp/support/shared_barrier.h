// A barrier that works across forked processes and threads alike: it lives in an anonymous
// MAP_SHARED mapping made before fork(). Used as the `local_barrier` of shm start-up in tests
// (production uses the rendezvous store). wait() throws TimeoutError instead of hanging when a
// participant never arrives.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace perseus::testing {

class SharedBarrier {
 public:
  explicit SharedBarrier(int parties,
                         std::chrono::milliseconds timeout = std::chrono::milliseconds(10000));
  ~SharedBarrier();
  SharedBarrier(const SharedBarrier&) = delete;
  SharedBarrier& operator=(const SharedBarrier&) = delete;

  void wait();

 private:
  struct State {
    std::atomic<uint32_t> arrived;
    std::atomic<uint32_t> generation;
  };
  State* state_;
  int parties_;
  std::chrono::milliseconds timeout_;
};

// A job id no other test run on this machine uses ("t<pid>-<counter>-<tag>").
std::string uniqueJobId(const char* tag);

// Names in /dev/shm that start with "perseus-<job_id>-".
std::vector<std::string> shmNamesOf(const std::string& job_id);

}  // namespace perseus::testing
