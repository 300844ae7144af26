// Logging with a level and a subsystem on every line:
//   PERSEUS_LOG(WARNING, kEngine) << "tensor " << name << " stalled";
// prints "[perseus 3 engine W] tensor grad.0 stalled" to stderr. The level comes from
// PERSEUS_LOG_LEVEL (or HOROVOD_LOG_LEVEL), read through the settings registry: trace, debug,
// info, warning, error or off; default warning.
#pragma once

#include <atomic>
#include <sstream>

namespace perseus {

enum class LogLevel : int { TRACE = 0, DEBUG = 1, INFO = 2, WARNING = 3, ERROR = 4, OFF = 5 };

enum class LogSubsystem : int {
  kCommon,
  kTransport,
  kRendezvous,
  kCollectives,
  kEngine,
  kKernels,
  kCuda,
  kCapi,
  kTimeline
};

namespace logging {
LogLevel minLevel();
void setMinLevel(LogLevel level);
// The rank printed on each line; -1 before the topology is known.
void setRank(int rank);
bool enabled(LogLevel level);
LogLevel parseLevel(const std::string& text);  // throws InvalidArgumentError

class LogMessage {
 public:
  LogMessage(LogLevel level, LogSubsystem subsystem);
  ~LogMessage();  // writes the whole line with one write(2), so lines never interleave
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  LogSubsystem subsystem_;
  std::ostringstream stream_;
};
}  // namespace logging

}  // namespace perseus

#define PERSEUS_LOG(level, subsystem)                                                              \
  if (!::perseus::logging::enabled(::perseus::LogLevel::level)) {                                  \
  } else                                                                                           \
    ::perseus::logging::LogMessage(::perseus::LogLevel::level, ::perseus::LogSubsystem::subsystem) \
        .stream()
