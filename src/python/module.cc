// perseus._core: the one extension module, a thin layer over include/perseus/c_api.h. It never
// includes framework headers; tensors arrive as DLPack capsules or buffer-protocol objects.
#include <pybind11/pybind11.h>

#include "call_site.h"
#include "errors.h"
#include "handle.h"

namespace py = pybind11;

namespace perseus_py {
void registerCollectives(py::module_& m);
void registerDistAllreduce(py::module_& m);
void registerFastCalls(py::module_& m);
void registerFastEntries(py::module_& m);
void registerFastOutputs(py::module_& m);
void registerRuntime(py::module_& m);
}  // namespace perseus_py

PYBIND11_MODULE(_core, m) {
  m.doc() = "Perseus native core (C API bindings). Use perseus.torch or perseus.mxnet instead.";
  perseus_py::registerErrors(m);
  perseus_py::registerHandle(m);
  perseus_py::registerRuntime(m);
  perseus_py::registerCollectives(m);
  perseus_py::registerFastCalls(m);
  perseus_py::registerFastOutputs(m);
  perseus_py::registerFastEntries(m);
  perseus_py::registerDistAllreduce(m);
  perseus_py::registerSiteFinder();
}
