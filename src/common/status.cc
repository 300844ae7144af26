#include "common/status.h"

namespace perseus {

const char* statusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "ok";
    case StatusCode::kInvalidArgument:
      return "invalid argument";
    case StatusCode::kNotInitialized:
      return "not initialized";
    case StatusCode::kMismatch:
      return "mismatch across ranks";
    case StatusCode::kPeerLost:
      return "peer lost";
    case StatusCode::kTimeout:
      return "timeout";
    case StatusCode::kDuplicateName:
      return "duplicate name";
    case StatusCode::kUnsupported:
      return "unsupported";
    case StatusCode::kInternal:
      return "internal error";
    case StatusCode::kShutDown:
      return "shut down";
    case StatusCode::kInProgress:
      return "in progress";
    case StatusCode::kAuthFailed:
      return "authentication failed";
  }
  return "unknown";
}

namespace detail {
void throwCheckFailure(const char* file, int line, const char* cond, const std::string& message) {
  std::ostringstream os;
  os << "Perseus internal check failed at " << file << ":" << line << ": " << cond;
  if (!message.empty()) os << ": " << message;
  throw InternalError(os.str());
}
}  // namespace detail

}  // namespace perseus
