#include "support/capi_job.h"

#include <stdlib.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "support/forked_store_server.h"

namespace perseus::testing {

std::vector<ChildStatus> runCapiJob(int n, const std::function<int(int)>& body,
                                    const char* timeout_s) {
  // The store runs in a process of its own: forking ranks beside an in-process server thread
  // can leave a child blocked on a lock that thread held (seen with ASan's allocator).
  ForkedStoreServer server(kCapiJobSecret);
  const int port = server.port();
  return runForked(
      n,
      [&](int rank) {
        setenv("PERSEUS_RANK", std::to_string(rank).c_str(), 1);
        setenv("PERSEUS_SIZE", std::to_string(n).c_str(), 1);
        setenv("PERSEUS_CONTROLLER_ADDR", "127.0.0.1", 1);
        setenv("PERSEUS_CONTROLLER_PORT", std::to_string(port).c_str(), 1);
        setenv("PERSEUS_SECRET", kCapiJobSecret, 1);
        setenv("PERSEUS_TIMEOUT", timeout_s, 1);
        setenv("PERSEUS_START_TIMEOUT", "20", 1);
        return body(rank);
      },
      std::chrono::seconds(60));
}

// A survivor that was not talking to rank 2 may see the other survivor go first: that one
// publishes the rank it lost, so a cascade names rank 2 too.
int checkLostRank2(int r, perseus_status s, const char* quoted_name, double took, double limit_s) {
  const std::string msg = perseus_last_error();
  fprintf(stderr, "rank %d: after %.2f s: status %d: %s\n", r, took, s, msg.c_str());
  CHILD_CHECK(s == PERSEUS_ERR_PEER_LOST || s == PERSEUS_ERR_TIMEOUT);
  CHILD_CHECK(msg.find(quoted_name) != std::string::npos);
  if (s == PERSEUS_ERR_PEER_LOST) CHILD_CHECK(msg.find("rank 2 ") != std::string::npos);
  CHILD_CHECK(took < limit_s);
  return 0;
}

}  // namespace perseus::testing
