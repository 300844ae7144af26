#include "engine/stall_report.h"

#include <algorithm>
#include <atomic>
#include <iomanip>
#include <sstream>

#include "common/logging.h"

namespace perseus::engine {

namespace {

std::atomic<StallReport::SiteFinder> site_finder{nullptr};

// Where this process's code is, from the registered finder, or "".
std::string foundSite() {
  const StallReport::SiteFinder finder = site_finder.load(std::memory_order_acquire);
  if (finder == nullptr) return "";
  char site[512] = {};
  if (finder(site, sizeof site) == 0) return "";
  site[sizeof site - 1] = '\0';
  return site;
}

bool missingHere(const StallNotice& n, int rank) {
  return std::find(n.missing.begin(), n.missing.end(), rank) != n.missing.end();
}

// "ALLREDUCE 'g' [4] float32 has waited 2.1 s for rank 1 (host h), which has not submitted it.
// Rank 0 waits for it at train.py:42."
std::string describe(const StallNotice& n, int rank, const std::string& site, bool noted) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(1) << opTypeName(n.op) << " '" << n.name << "'";
  if (!n.tensors.empty()) os << " " << n.tensors;
  if (n.process_set != 0) os << " in process set " << n.process_set;
  os << " has waited " << n.waited_s << " s for " << (n.missing.size() == 1 ? "rank " : "ranks ");
  for (size_t i = 0; i < n.missing.size(); ++i) {
    os << (i ? ", " : "") << n.missing[i] << " (host " << n.hosts[i] << ")";
  }
  os << ", which " << (n.missing.size() == 1 ? "has" : "have") << " not submitted it. ";
  if (missingHere(n, rank)) {
    os << "This rank (" << rank << ") is one of them.";
  } else if (!site.empty() && noted) {
    os << "Rank " << rank << " waits for it at " << site << ".";
  } else if (!site.empty()) {
    os << "Rank " << rank << " submitted it; its Python code is at " << site << ".";
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

void StallReport::setSiteFinder(SiteFinder finder) {
  site_finder.store(finder, std::memory_order_release);
}

void StallReport::noteCallSite(const std::string& name, std::string site) {
  std::lock_guard<std::mutex> lock(mu_);
  if (sites_.size() >= kMaxSites) sites_.clear();
  sites_[name] = std::move(site);
}

std::string StallReport::format(const StallNotice& n, int rank, double threshold_s,
                                const std::string& site, bool noted) {
  return "Stall diagnosis: " + describe(n, rank, site, noted) + footer(threshold_s);
}

void StallReport::report(const std::vector<StallNotice>& notices) {
  if (notices.empty()) return;
  // One line for the interval's notices: the coordinator puts the likely culprit first (the
  // collective that waits on the fewest ranks).
  std::vector<std::string> sites(notices.size());
  bool unknown = false;  // a notice this rank submitted has no noted site
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < notices.size(); ++i) {
      if (missingHere(notices[i], rank_)) continue;
      auto it = sites_.find(notices[i].name);
      if (it != sites_.end()) {
        sites[i] = it->second;
      } else {
        unknown = true;
      }
    }
  }
  // Asked once per line and outside the lock: the finder may wait a while for the GIL.
  const std::string found = unknown ? foundSite() : std::string();
  std::string line = "Stall diagnosis: ";
  for (size_t i = 0; i < notices.size(); ++i) {
    const bool noted = !sites[i].empty();
    line += (i ? " Also: " : "") + describe(notices[i], rank_, noted ? sites[i] : found, noted);
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
