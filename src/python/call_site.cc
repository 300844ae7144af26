#include "call_site.h"

#include <pybind11/pybind11.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "perseus/c_api.h"

namespace py = pybind11;

namespace perseus_py {
namespace {

// The directory of an already imported module `name` (with a trailing '/'), or "" when it is
// not imported: a package nobody imported has no frames on the stack. Never imports.
std::string loadedModuleDir(const char* name) {
  py::object module = py::reinterpret_steal<py::object>(PyImport_GetModule(py::str(name).ptr()));
  if (!module || !py::hasattr(module, "__file__") || module.attr("__file__").is_none()) return "";
  std::string file = module.attr("__file__").cast<std::string>();
  return file.substr(0, file.find_last_of('/') + 1);
}

bool startsWith(const std::string& s, const std::string& prefix) {
  return !prefix.empty() && s.compare(0, prefix.size(), prefix) == 0;
}

// Which frames are not the user's: perseus's and torch's, and the standard library's (the
// threading and contextlib frames between a thread's start and its code), but not packages
// installed under it.
class FrameFilter {
 public:
  FrameFilter()
      : perseus_(loadedModuleDir("perseus")),
        torch_(loadedModuleDir("torch")),
        stdlib_(loadedModuleDir("os")) {}

  // Whether `file` is perseus's or torch's: a thread whose innermost frame is there is in a
  // call into them.
  bool inPerseusOrTorch(const std::string& file) const {
    return startsWith(file, perseus_) || startsWith(file, torch_);
  }

  bool internal(const std::string& file) const {
    return file.empty() || file[0] == '<' || inPerseusOrTorch(file) ||
           (startsWith(file, stdlib_) &&
            file.find("-packages/", stdlib_.size()) == std::string::npos);
  }

  // 'file:line in function' of the innermost frame from `frame` (borrowed) outwards that is not
  // internal, or "". `inside`, if given: whether `frame` itself is perseus's or torch's.
  std::string userSite(PyFrameObject* frame, bool* inside) const {
    py::object held;  // owns the frames that PyFrame_GetBack returns
    for (bool innermost = true; frame != nullptr; innermost = false) {
      auto code =
          py::reinterpret_steal<py::object>(reinterpret_cast<PyObject*>(PyFrame_GetCode(frame)));
      const std::string file = code.attr("co_filename").cast<std::string>();
      if (innermost && inside != nullptr) *inside = inPerseusOrTorch(file);
      if (!internal(file)) {
        return file + ":" + std::to_string(PyFrame_GetLineNumber(frame)) + " in " +
               code.attr("co_name").cast<std::string>();
      }
      frame = PyFrame_GetBack(frame);  // new reference
      held = py::reinterpret_steal<py::object>(reinterpret_cast<PyObject*>(frame));
    }
    return "";
  }

 private:
  const std::string perseus_, torch_, stdlib_;
};

// A thread's InPerseusCall mark, registered while the thread lives (at its first call).
struct ThreadMark {
  ThreadMark();
  ~ThreadMark();
  std::atomic<bool> inside{false};
  const unsigned long ident;
};

std::mutex& marksMutex() {
  static auto* mu = new std::mutex();  // never destroyed: threads may exit during static exit
  return *mu;
}

std::vector<const ThreadMark*>& marks() {
  static auto* all = new std::vector<const ThreadMark*>();
  return *all;
}

ThreadMark::ThreadMark() : ident(PyThread_get_thread_ident()) {
  std::lock_guard<std::mutex> lock(marksMutex());
  marks().push_back(this);
}

ThreadMark::~ThreadMark() {
  std::lock_guard<std::mutex> lock(marksMutex());
  auto& all = marks();
  all.erase(std::remove(all.begin(), all.end(), this), all.end());
}

thread_local ThreadMark t_mark;

// Whether the thread `ident` is inside an InPerseusCall.
bool markedInside(unsigned long ident) {
  std::lock_guard<std::mutex> lock(marksMutex());
  for (const ThreadMark* m : marks()) {
    if (m->ident == ident && m->inside.load(std::memory_order_relaxed)) return true;
  }
  return false;
}

// threading.main_thread().ident, or None when threading was never imported.
py::object mainThreadId() {
  py::object threading =
      py::reinterpret_steal<py::object>(PyImport_GetModule(py::str("threading").ptr()));
  if (!threading) return py::none();
  return threading.attr("main_thread")().attr("ident");
}

// The site of the thread that is inside a call into perseus or torch (waiting in
// loss.backward(), optimizer.step() or dist.all_reduce), the main thread first; "" if none.
// Threads idle in the standard library (perseus's own future pool, data loader threads waiting
// on a queue) are not in such a call. GIL held.
std::string waiterSite() {
  py::object current_frames =
      py::reinterpret_borrow<py::object>(PySys_GetObject("_current_frames"));
  if (!current_frames) return "";
  const py::dict frames = current_frames();
  const FrameFilter filter;
  const py::object main_id = mainThreadId();
  std::string other;
  for (auto item : frames) {
    bool inside = false;
    std::string site =
        filter.userSite(reinterpret_cast<PyFrameObject*>(item.second.ptr()), &inside);
    if (!inside) inside = markedInside(PyLong_AsUnsignedLong(item.first.ptr()));
    if (!inside || site.empty()) continue;
    if (item.first.equal(main_id)) return site;
    if (other.empty()) other = std::move(site);
  }
  return other;
}

bool finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}

// waiterSite() taken on a thread of its own: the engine's thread that asks must not wait for
// the GIL without a limit (a thread holding the GIL may be waiting for that engine thread), so
// it waits for the answer a bounded time instead. Started at the first question, never joined
// (it may be blocked on the GIL when the process exits).
class SiteFinderThread {
 public:
  static SiteFinderThread& instance() {
    static auto* finder = new SiteFinderThread();  // outlives static destruction: never joined
    return *finder;
  }

  std::string ask(std::chrono::milliseconds limit) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!started_) {
      std::thread([this] { serve(); }).detach();
      started_ = true;
    }
    const uint64_t ticket = ++asked_;
    cv_.notify_all();
    if (!cv_.wait_for(lock, limit, [&] { return answered_ >= ticket; })) return "";
    return answer_;
  }

 private:
  void serve() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return asked_ > answered_; });
      const uint64_t ticket = asked_;
      lock.unlock();
      std::string site = siteUnderGil();
      lock.lock();
      answer_ = std::move(site);
      answered_ = ticket;
      cv_.notify_all();
    }
  }

  static std::string siteUnderGil() {
    if (!Py_IsInitialized() || finalizing()) return "";
    PyGILState_STATE gil = PyGILState_Ensure();
    std::string site;
    try {
      site = waiterSite();
    } catch (const std::exception&) {  // only the site is lost
    }
    PyErr_Clear();
    PyGILState_Release(gil);
    return site;
  }

  std::mutex mu_;
  std::condition_variable cv_;
  bool started_ = false;
  uint64_t asked_ = 0, answered_ = 0;
  std::string answer_;
};

// The engine's perseus_call_site_finder.
int findSite(char* site, size_t capacity) {
  constexpr std::chrono::milliseconds kGilWait{200};
  if (capacity == 0) return 0;
  const std::string found = SiteFinderThread::instance().ask(kGilWait);
  if (found.empty()) return 0;
  const size_t n = std::min(found.size(), capacity - 1);
  std::memcpy(site, found.data(), n);
  site[n] = '\0';
  return 1;
}

}  // namespace

InPerseusCall::InPerseusCall() { t_mark.inside.store(true, std::memory_order_relaxed); }

InPerseusCall::~InPerseusCall() { t_mark.inside.store(false, std::memory_order_relaxed); }

std::string callerSite() { return FrameFilter().userSite(PyEval_GetFrame(), nullptr); }

void registerSiteFinder() { perseus_set_call_site_finder(&findSite); }

}  // namespace perseus_py
