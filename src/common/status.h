// Error model inside the core (see docs/errors.md):
//  - recoverable I/O, timeout and cross-rank mismatch errors are exceptions derived from Error;
//  - broken invariants use PERSEUS_CHECK, which throws InternalError with file:line;
//  - asynchronous failures travel in the handle and are raised on wait().
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace perseus {

// Mirrors perseus_status in include/perseus/c_api.h; keep the numbers in sync.
enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,
  kNotInitialized = 2,
  kMismatch = 3,
  kPeerLost = 4,
  kTimeout = 5,
  kDuplicateName = 6,
  kUnsupported = 7,
  kInternal = 8,
  kShutDown = 9,
  kInProgress = 10,
  kAuthFailed = 11,
};

const char* statusCodeName(StatusCode code);

class Error : public std::runtime_error {
 public:
  Error(StatusCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  StatusCode code() const { return code_; }

 private:
  StatusCode code_;
};

#define PERSEUS_DEFINE_ERROR(Name, Code)                                \
  class Name : public Error {                                           \
   public:                                                              \
    explicit Name(const std::string& m) : Error(StatusCode::Code, m) {} \
  }

PERSEUS_DEFINE_ERROR(InvalidArgumentError, kInvalidArgument);
PERSEUS_DEFINE_ERROR(NotInitializedError, kNotInitialized);
PERSEUS_DEFINE_ERROR(MismatchError, kMismatch);
PERSEUS_DEFINE_ERROR(TimeoutError, kTimeout);
PERSEUS_DEFINE_ERROR(DuplicateNameError, kDuplicateName);
PERSEUS_DEFINE_ERROR(UnsupportedError, kUnsupported);
PERSEUS_DEFINE_ERROR(InternalError, kInternal);
PERSEUS_DEFINE_ERROR(ShutDownError, kShutDown);
PERSEUS_DEFINE_ERROR(AuthError, kAuthFailed);
#undef PERSEUS_DEFINE_ERROR

// A peer process is gone or its connection broke. Carries the global rank that was lost
// (-1 when unknown) so every message can name it.
class PeerLostError : public Error {
 public:
  PeerLostError(int rank, const std::string& message)
      : Error(StatusCode::kPeerLost, message), rank_(rank) {}
  int rank() const { return rank_; }

 private:
  int rank_;
};

namespace detail {
[[noreturn]] void throwCheckFailure(const char* file, int line, const char* cond,
                                    const std::string& message);
}  // namespace detail

}  // namespace perseus

// Invariant check: a failure is a bug in Perseus, not in the caller.
#define PERSEUS_CHECK(cond, ...)                                                                \
  do {                                                                                          \
    if (__builtin_expect(!(cond), 0)) {                                                         \
      std::ostringstream perseus_check_os_;                                                     \
      perseus_check_os_ << "" __VA_ARGS__;                                                      \
      ::perseus::detail::throwCheckFailure(__FILE__, __LINE__, #cond, perseus_check_os_.str()); \
    }                                                                                           \
  } while (0)

// Builds a message with stream syntax: PERSEUS_STR("rank " << r << " lost").
// (A lambda: `std::ostringstream() << "text"` is an rvalue stream in C++11 and later.)
#define PERSEUS_STR(stream_expr)        \
  ([&]() {                              \
    std::ostringstream perseus_str_os_; \
    perseus_str_os_ << stream_expr;     \
    return perseus_str_os_.str();       \
  }())
