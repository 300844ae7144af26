// What every rank logs for the coordinator's early stall notices (PERSEUS_STALL_DIAGNOSIS):
// one line per notice naming the ranks that have not submitted the collective (with their
// hosts), the collective, how long it waited, and where this rank waits for it.
//
// The call site is a Python file:line that the framework layer notes for a handle only once
// its wait has lasted a while (the slow path of Handle.wait, src/python/handle.cc): nothing is
// recorded per call. For notices without a noted site (a wait outside Handle.wait, such as DDP's
// reducer waiting in C++), report() asks the site finder the framework layer registered
// (setSiteFinder) once per line. Names with neither say so.
//
// Contract: noteCallSite() any thread; report() the cycle holder; lastReport() any thread;
// setSiteFinder() any thread, any time (also before an engine exists).
#pragma once

#include <cstddef>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "negotiation/request.h"

namespace perseus::engine {

class StallReport {
 public:
  // Writes where this process's code waits (a NUL-terminated "train.py:42 in step") into
  // site[0..capacity) and returns nonzero, or returns 0. Must return within a bounded time.
  using SiteFinder = int (*)(char* site, size_t capacity);
  // The finder of every engine of this process (nullptr: none).
  static void setSiteFinder(SiteFinder finder);

  StallReport(int rank, double threshold_s) : rank_(rank), threshold_s_(threshold_s) {}

  // The Python call site ("train.py:42") where this rank waits for the collective `name`.
  void noteCallSite(const std::string& name, std::string site);
  // Logs the notices of one coordinator round as one WARNING line.
  void report(const std::vector<StallNotice>& notices);
  // The last line this rank logged (empty if none): for tests and diagnostics.
  std::string lastReport() const;

  // The line for one notice, as this rank sees it (`site`: its call site, may be empty;
  // `noted`: the site is where the wait for this collective was, not where a site finder found
  // this rank's code).
  static std::string format(const StallNotice& n, int rank, double threshold_s,
                            const std::string& site, bool noted = true);

 private:
  static constexpr size_t kMaxSites = 256;  // sites of names that never stalled get dropped
  const int rank_;
  const double threshold_s_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::string> sites_;
  std::string last_;
};

}  // namespace perseus::engine
