#include "engine/stall_report.h"

#include <algorithm>
#include <iomanip>
#include <sstream>

#include "common/logging.h"

namespace perseus::engine {

void StallReport::noteCallSite(const std::string& name, std::string site) {
  std::lock_guard<std::mutex> lock(mu_);
  if (sites_.size() >= kMaxSites) sites_.clear();
  sites_[name] = std::move(site);
}

namespace {

// "ALLREDUCE 'g' [4] float32 has waited 2.1 s for rank 1 (host h), which has not submitted it.
// Rank 0 waits for it at train.py:42."
std::string describe(const StallNotice& n, int rank, const std::string& site) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(1) << opTypeName(n.op) << " '" << n.name << "'";
  if (!n.tensors.empty()) os << " " << n.tensors;
  if (n.process_set != 0) os << " in process set " << n.process_set;
  os << " has waited " << n.waited_s << " s for " << (n.missing.size() == 1 ? "rank " : "ranks ");
  for (size_t i = 0; i < n.missing.size(); ++i) {
    os << (i ? ", " : "") << n.missing[i] << " (host " << n.hosts[i] << ")";
  }
  os << ", which " << (n.missing.size() == 1 ? "has" : "have") << " not submitted it. ";
  const bool missing_here = std::find(n.missing.begin(), n.missing.end(), rank) != n.missing.end();
  if (missing_here) {
    os << "This rank (" << rank << ") is one of them.";
  } else if (!site.empty()) {
    os << "Rank " << rank << " waits for it at " << site << ".";
  } else {
    os << "Rank " << rank << " submitted it.";
  }
  return os.str();
}

std::string footer(double threshold_s) {
  std::ostringstream os;
  os << " A rank that is slow, blocked, or skipping a collective stalls the others; every rank "
        "must submit the same collectives. (PERSEUS_STALL_DIAGNOSIS="
     << threshold_s << " s; not an error.)";
  return os.str();
}

}  // namespace

std::string StallReport::format(const StallNotice& n, int rank, double threshold_s,
                                const std::string& site) {
  return "Stall diagnosis: " + describe(n, rank, site) + footer(threshold_s);
}

void StallReport::report(const std::vector<StallNotice>& notices) {
  if (notices.empty()) return;
  // One line for the interval's notices: the coordinator puts the likely culprit first (the
  // collective that waits on the fewest ranks).
  std::string line = "Stall diagnosis: ";
  for (size_t i = 0; i < notices.size(); ++i) {
    std::string site;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = sites_.find(notices[i].name);
      if (it != sites_.end()) site = it->second;
    }
    line += (i ? " Also: " : "") + describe(notices[i], rank_, site);
  }
  line += footer(threshold_s_);
  PERSEUS_LOG(WARNING, kEngine) << line;
  std::lock_guard<std::mutex> lock(mu_);
  last_ = std::move(line);
}

std::string StallReport::lastReport() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_;
}

}  // namespace perseus::engine
