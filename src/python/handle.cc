#include "handle.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>

#include "call_site.h"
#include "callbacks.h"
#include "dlpack.h"
#include "errors.h"

namespace py = pybind11;

namespace perseus_py {
namespace {

// Handles whose Python object died before completion; guarded by the GIL.
std::vector<std::shared_ptr<HandleState>>& orphans() {
  static auto* list = new std::vector<std::shared_ptr<HandleState>>();
  return *list;
}

void sweepOrphans() {
  auto& list = orphans();
  list.erase(std::remove_if(list.begin(), list.end(),
                            [](const std::shared_ptr<HandleState>& s) {
                              int done = 0;
                              return perseus_poll(s->id, &done) != PERSEUS_OK || done != 0;
                            }),
             list.end());
}

// manager_ctx of an output DLPack tensor: its shape and a strong reference to the Handle.
struct OutputContext {
  std::vector<int64_t> shape;
  PyObject* owner;
};

void deleteOutput(DLManagedTensor* self) {
  auto* ctx = static_cast<OutputContext*>(self->manager_ctx);
  // Consumers may call the deleter from any thread.
  PyGILState_STATE gil = PyGILState_Ensure();
  Py_DECREF(ctx->owner);
  PyGILState_Release(gil);
  delete ctx;
  delete self;
}

void destroyCapsule(PyObject* capsule) {
  // Still named "dltensor": nobody consumed it, so it owns the tensor.
  if (PyCapsule_IsValid(capsule, kDltensor)) {
    auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, kDltensor));
    managed->deleter(managed);
  }
}

DLDataType toDlDtype(int32_t dtype) {
  switch (dtype) {
    case PERSEUS_UINT8:
      return {kDLUInt, 8, 1};
    case PERSEUS_INT8:
      return {kDLInt, 8, 1};
    case PERSEUS_INT32:
      return {kDLInt, 32, 1};
    case PERSEUS_INT64:
      return {kDLInt, 64, 1};
    case PERSEUS_FLOAT16:
      return {kDLFloat, 16, 1};
    case PERSEUS_BFLOAT16:
      return {kDLBfloat, 16, 1};
    case PERSEUS_FLOAT32:
      return {kDLFloat, 32, 1};
    case PERSEUS_FLOAT64:
      return {kDLFloat, 64, 1};
    case PERSEUS_BOOL:
      return {kDLBool, 8, 1};
    default:
      throw StatusError(PERSEUS_ERR_INTERNAL, "output has unknown dtype " + std::to_string(dtype));
  }
}

}  // namespace

// A wait that outlasted a slice: notes where the Python caller waits (the first frame
// outside perseus, torch and the standard library: callerSite) for the stall diagnosis. Only
// slow waits pay for it; nothing is recorded per call. GIL held; a failure only loses the site.
void noteCallSite(perseus_handle id) {
  try {
    std::string site = callerSite();
    if (!site.empty()) perseus_handle_note_call_site(id, site.c_str());
  } catch (const std::exception&) {
    PyErr_Clear();
  }
}

HandleState::~HandleState() { perseus_release(id); }

void HandleState::finish(perseus_status s, std::string message) {
  done = true;
  status = s;
  error = std::move(message);
  args.clear();
}

Handle::~Handle() {
  if (!state_->done) {
    int done = 0;
    if (perseus_poll(state_->id, &done) == PERSEUS_OK && done == 0) {
      orphans().push_back(std::move(state_));
    }
  }
}

void Handle::raiseIfFailed() {
  if (state_->status != PERSEUS_OK) throw StatusError(state_->status, state_->error);
}

bool Handle::poll() {
  if (state_->done) return true;
  int done = 0;
  perseus_status s = perseus_poll(state_->id, &done);
  if (s != PERSEUS_OK) {
    state_->finish(s, perseus_last_error());
    return true;
  }
  if (done == 0) return false;
  s = perseus_wait(state_->id, 0.0);
  state_->finish(s, s == PERSEUS_OK ? "" : perseus_last_error());
  return true;
}

bool Handle::wait(double timeout_s) {
  if (!state_->done) {
    // Waits in slices so that Ctrl-C (a pending Python signal) interrupts a long wait.
    constexpr double kSliceS = 0.25;
    const auto start = std::chrono::steady_clock::now();
    perseus_status s = PERSEUS_ERR_IN_PROGRESS;
    std::string message;
    bool site_noted = false;
    for (;;) {
      double slice = kSliceS;
      if (timeout_s >= 0) {
        double elapsed =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        slice = std::max(0.0, std::min(kSliceS, timeout_s - elapsed));
      }
      {
        py::gil_scoped_release release;
        s = perseus_wait(state_->id, slice);
        if (s != PERSEUS_OK && s != PERSEUS_ERR_IN_PROGRESS) message = perseus_last_error();
      }
      if (s != PERSEUS_ERR_IN_PROGRESS) break;
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
      if (!site_noted && slice >= kSliceS) {  // a full slice passed: a slow wait, not a poll
        noteCallSite(state_->id);
        site_noted = true;
      }
      if (timeout_s >= 0 && slice <= 0.0) return false;
    }
    state_->finish(s, message);
  }
  raiseIfFailed();
  return true;
}

void Handle::requireDone(const char* what) {
  if (!state_->done && !poll()) {
    throw StatusError(PERSEUS_ERR_INVALID_ARGUMENT,
                      std::string(what) + ": the handle has not completed; call wait() first");
  }
  raiseIfFailed();
}

int32_t Handle::numOutputs() {
  requireDone("num_outputs");
  int32_t count = 0;
  check(perseus_handle_num_outputs(state_->id, &count), "perseus_handle_num_outputs");
  return count;
}

py::object Handle::output(py::object self, int32_t index, bool as_dlpack) {
  requireDone("output");
  perseus_tensor t{};
  check(perseus_handle_output(state_->id, index, &t), "perseus_handle_output");
  std::vector<int64_t> shape(t.shape, t.shape + t.ndim);
  if (!as_dlpack) {
    if (t.device != PERSEUS_DEVICE_CPU) {
      invalidArgument("output " + std::to_string(index) +
                      " lives on a CUDA device; ask for it as DLPack (as_dlpack=True)");
    }
    // numpy has no bfloat16: such outputs come back as their uint16 bit patterns.
    const char* name = t.dtype == PERSEUS_BFLOAT16 ? "uint16" : dtypeName(t.dtype);
    return py::array(py::dtype(name), shape, {}, t.data, self);
  }
  auto* ctx = new OutputContext{shape, self.inc_ref().ptr()};
  auto* managed = new DLManagedTensor{};
  managed->dl_tensor.data = t.data;
  managed->dl_tensor.device =
      t.device == PERSEUS_DEVICE_CPU ? DLDevice{kDLCPU, 0} : DLDevice{kDLCUDA, t.device};
  managed->dl_tensor.ndim = t.ndim;
  managed->dl_tensor.dtype = toDlDtype(t.dtype);
  managed->dl_tensor.shape = ctx->shape.data();
  managed->dl_tensor.strides = nullptr;
  managed->dl_tensor.byte_offset = 0;
  managed->manager_ctx = ctx;
  managed->deleter = deleteOutput;
  PyObject* capsule = PyCapsule_New(managed, kDltensor, destroyCapsule);
  if (capsule == nullptr) {
    deleteOutput(managed);
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::object>(capsule);
}

std::vector<int64_t> Handle::receivedSplits() {
  requireDone("received_splits");
  const int64_t* splits = nullptr;
  int32_t count = 0;
  check(perseus_handle_received_splits(state_->id, &splits, &count),
        "perseus_handle_received_splits");
  return std::vector<int64_t>(splits, splits + count);
}

int32_t Handle::joinRank() {
  requireDone("join_rank");
  int32_t rank = -1;
  check(perseus_handle_join_rank(state_->id, &rank), "perseus_handle_join_rank");
  return rank;
}

py::tuple Handle::times() {
  int64_t submitted = 0, completed = 0;
  check(perseus_handle_times(state_->id, &submitted, &completed), "perseus_handle_times");
  return py::make_tuple(
      static_cast<double>(submitted) * 1e-9,
      completed ? py::object(py::float_(static_cast<double>(completed) * 1e-9)) : py::none());
}

void Handle::cudaStreamWait(uintptr_t stream) {
  check(perseus_handle_cuda_stream_wait(state_->id, reinterpret_cast<void*>(stream)),
        "perseus_handle_cuda_stream_wait");
}

void Handle::setCallback(py::function fn) {
  PyObject* owned = fn.inc_ref().ptr();  // released by the dispatcher after the call
  perseus_status s = perseus_set_callback(state_->id, perseusCallbackTrampoline, owned);
  if (s != PERSEUS_OK) {
    Py_DECREF(owned);
    check(s, "perseus_set_callback");
  }
}

py::object makeHandle(perseus_handle id, std::vector<std::unique_ptr<TensorArg>> args) {
  sweepOrphans();
  auto state = std::make_shared<HandleState>(id, std::move(args));
  return py::cast(std::make_unique<Handle>(std::move(state)));
}

void dropOrphans() { orphans().clear(); }

void registerHandle(py::module_& m) {
  py::class_<Handle>(m, "Handle",
                     "One submitted collective. Keeps its input/output memory alive until it "
                     "completes; outputs keep the handle alive.")
      .def("poll", &Handle::poll, "True once the operation completed (successfully or not).")
      .def("wait", &Handle::wait, py::arg("timeout") = -1.0,
           "Waits (GIL released); False if `timeout` seconds passed first. Raises the "
           "operation's error.")
      .def("num_outputs", &Handle::numOutputs)
      .def(
          "output",
          [](py::object self, int32_t index, bool as_dlpack) {
            return self.cast<Handle&>().output(self, index, as_dlpack);
          },
          py::arg("index") = 0, py::arg("as_dlpack") = false,
          "Output `index` as a numpy array (CPU; bfloat16 as uint16 bits) or, with "
          "as_dlpack, a DLPack capsule. Either keeps this handle alive.")
      .def("received_splits", &Handle::receivedSplits)
      .def("join_rank", &Handle::joinRank)
      .def("times", &Handle::times,
           "(submitted, completed): when the engine took and finished the operation, in "
           "seconds of time.perf_counter()'s clock (CLOCK_MONOTONIC); completed is None until "
           "done.")
      .def("cuda_stream_wait", &Handle::cudaStreamWait, py::arg("stream"),
           py::call_guard<py::gil_scoped_release>(),
           "Makes `stream` wait for the collective; waits on the host (GIL released) until "
           "the engine has launched it, which negotiation may delay.")
      .def("set_callback", &Handle::setCallback, py::arg("fn"))
      .def_property_readonly("id", &Handle::id)
      .def_property_readonly("done", &Handle::done)
      .def_property_readonly("status", &Handle::status);
}

}  // namespace perseus_py
