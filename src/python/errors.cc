#include "errors.h"

namespace py = pybind11;

namespace perseus_py {

std::string statusMessage(perseus_status status, const char* what) {
  const char* last = perseus_last_error();
  return (last != nullptr && last[0] != '\0')
             ? std::string(last)
             : std::string(what) + " failed with status " + std::to_string(status);
}

void check(perseus_status status, const char* what) {
  if (status == PERSEUS_OK) return;
  throw StatusError(status, statusMessage(status, what));
}

void setStatusError(perseus_status status, const std::string& message) {
  try {
    py::object cls = py::module_::import("perseus.common.exceptions")
                         .attr("exception_for_status")(static_cast<int>(status));
    py::object exc = cls(message);
    exc.attr("status") = static_cast<int>(status);
    PyErr_SetObject(cls.ptr(), exc.ptr());
  } catch (py::error_already_set& e) {
    e.restore();  // the import or the class failed: that error is the one to see
  }
}

void invalidArgument(const std::string& message) {
  throw StatusError(PERSEUS_ERR_INVALID_ARGUMENT, message);
}

void registerErrors(py::module_& m) {
  // The exception classes live in Python so the framework layers can subclass and catch them
  // without importing the extension; they are looked up when an error is raised.
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      setStatusError(e.code(), e.what());
    }
  });
  m.attr("OK") = static_cast<int>(PERSEUS_OK);
  m.attr("ERR_IN_PROGRESS") = static_cast<int>(PERSEUS_ERR_IN_PROGRESS);
}

}  // namespace perseus_py
