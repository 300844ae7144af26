// Jobs of forked ranks that use the C API and bootstrap through a store server exactly as under
// perseusrun (PERSEUS_* variables), for the C API's tests.
#pragma once

#include <cstdio>
#include <functional>
#include <vector>

#include "perseus/c_api.h"
#include "support/forked_ranks.h"

namespace perseus::testing {

inline constexpr const char* kCapiJobSecret =
    "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

inline perseus_tensor cpuTensor(void* data, perseus_dtype t, int ndim, const int64_t* shape) {
  return perseus_tensor{data, t, ndim, shape, PERSEUS_DEVICE_CPU, nullptr};
}

// Runs `body(rank)` in `n` forked ranks of one job with PERSEUS_TIMEOUT `timeout_s`; returns
// their statuses. Every job is bounded (60 s).
std::vector<ChildStatus> runCapiJob(int n, const std::function<int(int)>& body,
                                    const char* timeout_s = "5");

// A survivor's failed call after rank 2 was SIGKILLed: 0 when the cause names `quoted_name`
// and, for a lost peer, rank 2, and came within `limit_s` (else 1, with what differed).
int checkLostRank2(int r, perseus_status s, const char* quoted_name, double took, double limit_s);

}  // namespace perseus::testing

// In a rank's body: returns 1 (the child's exit code) with the line and the last error when
// `cond` does not hold.
#define CHILD_CHECK(cond)                                                                     \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      fprintf(stderr, "rank check failed at line %d: %s (last error: %s)\n", __LINE__, #cond, \
              perseus_last_error());                                                          \
      return 1;                                                                               \
    }                                                                                         \
  } while (0)
