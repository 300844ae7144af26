#include "common/logging.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "common/params.h"
#include "common/status.h"

namespace perseus::logging {
namespace {

// Read through the settings registry, so that the first log lines already honour the level
// (and HOROVOD_LOG_LEVEL) that perseus_init() applies later.
LogLevel levelFromEnvironment() {
  try {
    return parseLevel(Params::fromEnvironment().log_level);
  } catch (const Error&) {
    return LogLevel::WARNING;  // perseus_init() reports the bad value; logging must not throw.
  }
}

std::atomic<int> g_min_level{static_cast<int>(levelFromEnvironment())};
std::atomic<int> g_rank{-1};

const char* subsystemName(LogSubsystem s) {
  switch (s) {
    case LogSubsystem::kCommon:
      return "common";
    case LogSubsystem::kTransport:
      return "transport";
    case LogSubsystem::kRendezvous:
      return "rendezvous";
    case LogSubsystem::kCollectives:
      return "collectives";
    case LogSubsystem::kEngine:
      return "engine";
    case LogSubsystem::kKernels:
      return "kernels";
    case LogSubsystem::kCuda:
      return "cuda";
    case LogSubsystem::kCapi:
      return "capi";
    case LogSubsystem::kTimeline:
      return "timeline";
  }
  return "?";
}

const char kLevelLetters[] = "TDIWE";

}  // namespace

LogLevel minLevel() { return static_cast<LogLevel>(g_min_level.load(std::memory_order_relaxed)); }
void setMinLevel(LogLevel level) { g_min_level.store(static_cast<int>(level)); }
void setRank(int rank) { g_rank.store(rank); }
bool enabled(LogLevel level) {
  return static_cast<int>(level) >= g_min_level.load(std::memory_order_relaxed);
}

LogLevel parseLevel(const std::string& text) {
  std::string t;
  for (char c : text) t.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  if (t == "trace") return LogLevel::TRACE;
  if (t == "debug") return LogLevel::DEBUG;
  if (t == "info") return LogLevel::INFO;
  if (t == "warning" || t == "warn") return LogLevel::WARNING;
  if (t == "error") return LogLevel::ERROR;
  if (t == "off" || t == "none" || t == "fatal") return LogLevel::OFF;
  throw InvalidArgumentError("PERSEUS_LOG_LEVEL='" + text +
                             "' is not one of trace, debug, info, warning, error, off");
}

LogMessage::LogMessage(LogLevel level, LogSubsystem subsystem)
    : level_(level), subsystem_(subsystem) {}

LogMessage::~LogMessage() {
  std::ostringstream line;
  line << "[perseus ";
  int rank = g_rank.load();
  if (rank >= 0) line << rank << ' ';
  line << subsystemName(subsystem_) << ' ' << kLevelLetters[static_cast<int>(level_)] << "] "
       << stream_.str() << '\n';
  std::string text = line.str();
  ssize_t ignored = ::write(STDERR_FILENO, text.data(), text.size());
  (void)ignored;
}

}  // namespace perseus::logging
