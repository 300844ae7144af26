#include "callbacks.h"

#include <pybind11/pybind11.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

namespace perseus_py {
namespace {

// Heap-allocated and never destroyed: a joinable std::thread in a static destructor would
// terminate the process at exit.
class Dispatcher {
 public:
  void post(PyObject* fn, int status) {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;  // leaks fn: no GIL to decref with, and the process is exiting
    if (!started_) {
      started_ = true;
      std::thread([this] { run(); }).detach();
    }
    queue_.emplace_back(fn, status);
    cv_.notify_one();
  }

  void stop() {
    std::deque<std::pair<PyObject*, int>> rest;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopped_ = true;
      rest.swap(queue_);
      cv_.notify_all();
    }
    for (auto& item : rest) Py_DECREF(item.first);  // GIL held by the caller
  }

 private:
  // The thread keeps one Python thread state for its life: a PyGILState_Ensure/Release pair
  // per callback made and deleted one each time (with its frame stack, mapped and unmapped),
  // on the path of every completion a torch Future or an MXNet callback waits for. At stop()
  // the state is left to the interpreter, which deletes every thread's state at finalization.
  void run() {
    PyGILState_Ensure();
    PyThreadState* state = PyEval_SaveThread();
    for (;;) {
      std::pair<PyObject*, int> item;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stopped_ || !queue_.empty(); });
        if (stopped_) return;
        item = queue_.front();
        queue_.pop_front();
      }
      PyEval_RestoreThread(state);
      PyObject* result = PyObject_CallFunction(item.first, "i", item.second);
      if (result == nullptr) {
        PyErr_WriteUnraisable(item.first);
      } else {
        Py_DECREF(result);
      }
      Py_DECREF(item.first);
      state = PyEval_SaveThread();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<PyObject*, int>> queue_;
  bool started_ = false;
  bool stopped_ = false;
};

Dispatcher& dispatcher() {
  static Dispatcher* instance = new Dispatcher();
  return *instance;
}

}  // namespace

void postCallback(PyObject* fn, int status) { dispatcher().post(fn, status); }

void stopCallbacks() { dispatcher().stop(); }

extern "C" void perseusCallbackTrampoline(perseus_handle /*handle*/, perseus_status status,
                                          void* user_data) {
  postCallback(static_cast<PyObject*>(user_data), static_cast<int>(status));
}

}  // namespace perseus_py
