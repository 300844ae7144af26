// The Python Handle over a perseus_handle: poll/wait, outputs, callbacks.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <string>
#include <vector>

#include "perseus/c_api.h"
#include "tensor_arg.h"

namespace perseus_py {

// What one submitted collective owns: the library handle and the arguments whose memory must
// outlive it. Created and destroyed with the GIL held (TensorArg needs it).
struct HandleState {
  HandleState(perseus_handle handle, std::vector<std::unique_ptr<TensorArg>> arguments)
      : id(handle), args(std::move(arguments)) {}
  ~HandleState();
  HandleState(const HandleState&) = delete;
  HandleState& operator=(const HandleState&) = delete;

  // Records the final status; the arguments are dropped at once (the engine is done with them).
  void finish(perseus_status s, std::string message);

  perseus_handle id;
  std::vector<std::unique_ptr<TensorArg>> args;
  bool done = false;
  perseus_status status = PERSEUS_OK;
  std::string error;
};

// A wait that outlasted a slice: notes where the Python caller waits (the first frame
// outside perseus, torch and the standard library: callerSite) for the stall diagnosis. Only
// slow waits pay for it; nothing is recorded per call. GIL held; a failure only loses the site.
void noteCallSite(perseus_handle id);

class Handle {
 public:
  explicit Handle(std::shared_ptr<HandleState> state) : state_(std::move(state)) {}
  // A handle dropped before completion cannot free its buffers yet: its state goes to an
  // orphan list that submissions sweep (see sweepOrphans).
  ~Handle();
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

  bool poll();
  // Blocks with the GIL released; timeout_s < 0 waits without limit (PERSEUS_TIMEOUT still
  // bounds every transfer). Returns false if the timeout passed first; raises on failure.
  bool wait(double timeout_s);
  int32_t numOutputs();
  // Output i as a numpy array (CPU) or a DLPack capsule; both keep `self` alive.
  pybind11::object output(pybind11::object self, int32_t index, bool as_dlpack);
  std::vector<int64_t> receivedSplits();
  int32_t joinRank();
  // (submitted, completed) in seconds of time.perf_counter()'s clock; completed is None
  // until done.
  pybind11::tuple times();
  void cudaStreamWait(uintptr_t stream);
  // fn(status: int) runs later on the extension's callback thread, with the GIL.
  void setCallback(pybind11::function fn);
  perseus_handle id() const { return state_->id; }
  bool done() const { return state_->done; }
  int status() const { return static_cast<int>(state_->status); }

 private:
  void requireDone(const char* what);
  void raiseIfFailed();
  std::shared_ptr<HandleState> state_;
};

// Builds the Python handle of a freshly submitted request (sweeps finished orphans first).
pybind11::object makeHandle(perseus_handle id, std::vector<std::unique_ptr<TensorArg>> args);
// Drops every orphan (after shutdown, when the engine no longer touches any buffer).
void dropOrphans();

void registerHandle(pybind11::module_& m);

}  // namespace perseus_py
