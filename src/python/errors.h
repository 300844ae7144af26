// Turns perseus_status codes into the Python exceptions of perseus.common.exceptions.
#pragma once

#include <pybind11/pybind11.h>

#include <stdexcept>
#include <string>

#include "perseus/c_api.h"

namespace perseus_py {

// Thrown by the binding code; translated to perseus.common.exceptions.exception_for_status(code)
// with `status` set on the exception object.
class StatusError : public std::runtime_error {
 public:
  StatusError(perseus_status code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  perseus_status code() const { return code_; }

 private:
  perseus_status code_;
};

// Throws StatusError for a non-OK status, with perseus_last_error() of this thread as the
// message (prefixed by `what` when the library left none).
void check(perseus_status status, const char* what);

// The message check() raises for a failed `status`.
std::string statusMessage(perseus_status status, const char* what);

// Sets the pending Python exception for a failed status (what the StatusError translator
// raises), for code that returns to CPython without throwing.
void setStatusError(perseus_status status, const std::string& message);

// Raises an InvalidArgument StatusError with `message`.
[[noreturn]] void invalidArgument(const std::string& message);

void registerErrors(pybind11::module_& m);

}  // namespace perseus_py
