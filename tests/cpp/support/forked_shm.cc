#include "support/forked_shm.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <vector>

#include "support/forked_ranks.h"
#include "support/shared_barrier.h"
#include "support/shm_groups.h"
#include "transport/shm/cross_memory.h"
#include "transport/shm/shm_local_group.h"

namespace perseus::testing {
namespace {

// At the same address in every forked child as in the parent.
const uint64_t kParentWord = 0x5eed5eed5eed5eedULL;

}  // namespace

bool crossMemoryPermitted() {
  uint64_t got = 0;
  return transport::shm::readPeerMemory(::getppid(), &kParentWord, &got, sizeof got) == 0 &&
         got == kParentWord;
}

void expectForkedShmRanksOk(
    int n, const std::string& job_prefix, const std::function<Params(int)>& params_of,
    const std::function<int(int, const Params&, collectives::Communicator&)>& body) {
  const std::string job = uniqueJobId(job_prefix.c_str());
  SharedBarrier barrier(n);
  auto rank = [&](int r) {
    const Params params = params_of(r);
    std::vector<int> members(n);
    for (int i = 0; i < n; ++i) members[i] = i;
    auto group =
        transport::shm::createShmLocalGroup(job, r, members, params, [&] { barrier.wait(); });
    auto t = makeShmTransport(*group, r, n, params);
    collectives::Communicator comm(t.get(), group->arena.get(), members, 0, params);
    return body(r, params, comm);
  };
  auto st = runForked(n, rank, std::chrono::seconds(60));
  for (int r = 0; r < n; ++r) EXPECT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].describe();
}

}  // namespace perseus::testing
