// The PMI-1 wire protocol that MPICH's Hydra (and Intel MPI's, which is Hydra too) serves to
// every process it starts on the inherited socket PMI_FD. Perseus uses it once, at start-up,
// to share the rendezvous store's address and secret: rank 0 puts them in the job's key-value
// space, everyone meets at a PMI barrier, the others get them, and all finalize.
//
// Note [PMI wire]
// Requests and replies are single lines of space-separated key=value pairs starting with
// cmd=..., e.g. "cmd=put kvsname=kvs_1 key=k value=v\n" -> "cmd=put_result rc=0\n". A put
// becomes visible to other processes after the next barrier_in/barrier_out.
#pragma once

#include <chrono>
#include <map>
#include <string>

namespace perseus::rendezvous {

class PmiClient {
 public:
  // Speaks on `fd` (not owned: Hydra opened it). Sends "init". Throws InternalError naming
  // `what` when the server does not answer within `timeout` or answers with rc != 0.
  PmiClient(int fd, std::chrono::milliseconds timeout);

  const std::string& kvsName() const { return kvs_; }
  void put(const std::string& key, const std::string& value);
  std::string get(const std::string& key);
  void barrier();
  void finalize();

 private:
  std::map<std::string, std::string> call(const std::string& request, const std::string& reply);

  int fd_;
  std::chrono::steady_clock::time_point deadline_;
  std::string kvs_;
  std::string pending_;
};

}  // namespace perseus::rendezvous
