// Handle queries and process sets in the C API.
#include "capi/runtime.h"

using namespace perseus;
using perseus::capi::findHandle;
using perseus::capi::guarded;

namespace {

// Completed successfully, or throws the operation's error (so getters report it).
std::shared_ptr<engine::Handle> completedOk(perseus_handle id, const char* call) {
  auto h = findHandle(id);
  if (!h->done()) {
    throw Error(
        StatusCode::kInProgress,
        PERSEUS_STR(call << ": '" << h->name() << "' has not completed; wait for it first"));
  }
  if (h->status() != StatusCode::kOk) throw Error(h->status(), h->message());
  return h;
}

// The running engine, which may run its cycles on the waiting thread; null once shut down.
std::shared_ptr<engine::Engine> currentEngine() {
  std::lock_guard<std::mutex> lock(capi::runtime().mu);
  return capi::runtime().engine;
}

bool waitFor(engine::Handle& h, double timeout_s, int64_t spin_us) {
  if (h.done()) return true;
  if (auto e = currentEngine()) return e->waitFor(h, timeout_s, spin_us);
  return h.wait(timeout_s, spin_us);
}

std::shared_ptr<engine::Handle> waitOk(const std::shared_ptr<engine::Handle>& h, double spin_us) {
  waitFor(*h, -1, static_cast<int64_t>(spin_us));
  if (h->status() != StatusCode::kOk) throw Error(h->status(), h->message());
  return h;
}

}  // namespace

extern "C" {

perseus_status perseus_poll(perseus_handle handle, int* done) {
  return guarded([&] {
    if (done == nullptr) throw InvalidArgumentError("perseus_poll: done is NULL");
    auto h = findHandle(handle);
    auto e = h->done() ? nullptr : currentEngine();
    *done = (e ? e->poll(*h) : h->done()) ? 1 : 0;
  });
}

perseus_status perseus_wait(perseus_handle handle, double timeout_s) {
  return guarded([&] {
    auto h = findHandle(handle);
    if (!waitFor(*h, timeout_s, capi::runtime().spin_us.load(std::memory_order_relaxed))) {
      throw Error(
          StatusCode::kInProgress,
          PERSEUS_STR("'" << h->name() << "' did not complete within " << timeout_s << " s"));
    }
    if (h->status() != StatusCode::kOk) throw Error(h->status(), h->message());
  });
}

perseus_status perseus_set_callback(perseus_handle handle, perseus_callback cb, void* user_data) {
  return guarded([&] {
    if (cb == nullptr) throw InvalidArgumentError("perseus_set_callback: cb is NULL");
    auto h = findHandle(handle);
    engine::Handle::Callback call = [cb, user_data, handle](StatusCode code, const std::string&) {
      cb(handle, static_cast<perseus_status>(code), user_data);
    };
    if (auto e = h->done() ? nullptr : currentEngine()) {
      e->setCallback(*h, std::move(call));
    } else {
      h->setCallback(std::move(call));
    }
  });
}

perseus_status perseus_handle_num_outputs(perseus_handle handle, int32_t* count) {
  return guarded([&] {
    if (count == nullptr) throw InvalidArgumentError("perseus_handle_num_outputs: count is NULL");
    *count =
        static_cast<int32_t>(completedOk(handle, "perseus_handle_num_outputs")->outputs().size());
  });
}

perseus_status perseus_handle_output(perseus_handle handle, int32_t index, perseus_tensor* out) {
  return guarded([&] {
    if (out == nullptr) throw InvalidArgumentError("perseus_handle_output: out is NULL");
    auto h = completedOk(handle, "perseus_handle_output");
    const auto& outs = h->outputs();
    if (index < 0 || index >= static_cast<int32_t>(outs.size())) {
      throw InvalidArgumentError(PERSEUS_STR("perseus_handle_output: '"
                                             << h->name() << "' has " << outs.size()
                                             << " library-owned outputs, not index " << index));
    }
    const engine::OwnedTensor& t = outs[index];
    out->data = t.ptr();
    out->dtype = static_cast<int32_t>(t.dtype);
    out->ndim = static_cast<int32_t>(t.shape.size());
    out->shape = t.shape.data();
    out->device = t.device >= 0 ? t.device : PERSEUS_DEVICE_CPU;
    out->cuda_stream = nullptr;
  });
}

perseus_status perseus_handle_received_splits(perseus_handle handle, const int64_t** splits,
                                              int32_t* count) {
  return guarded([&] {
    if (splits == nullptr || count == nullptr)
      throw InvalidArgumentError("perseus_handle_received_splits: NULL argument");
    auto h = completedOk(handle, "perseus_handle_received_splits");
    *splits = h->receivedSplits().data();
    *count = static_cast<int32_t>(h->receivedSplits().size());
  });
}

perseus_status perseus_handle_times(perseus_handle handle, int64_t* submitted_ns,
                                    int64_t* completed_ns) {
  return guarded([&] {
    auto h = findHandle(handle);
    if (submitted_ns != nullptr) *submitted_ns = h->submittedNs();
    if (completed_ns != nullptr) *completed_ns = h->done() ? h->completedNs() : 0;
  });
}

perseus_status perseus_handle_note_call_site(perseus_handle handle, const char* site) {
  return guarded([&] {
    if (site == nullptr) throw InvalidArgumentError("perseus_handle_note_call_site: site is NULL");
    auto h = findHandle(handle);
    if (auto e = currentEngine()) e->noteCallSite(h->name(), site);
  });
}

perseus_status perseus_set_call_site_finder(perseus_call_site_finder finder) {
  return guarded([&] { engine::StallReport::setSiteFinder(finder); });
}

perseus_status perseus_handle_join_rank(perseus_handle handle, int32_t* rank) {
  return guarded([&] {
    if (rank == nullptr) throw InvalidArgumentError("perseus_handle_join_rank: rank is NULL");
    *rank = completedOk(handle, "perseus_handle_join_rank")->intResult();
  });
}

perseus_status perseus_handle_cuda_stream_wait(perseus_handle handle, void* stream) {
  // CUDA ops: `stream` waits for the GPU work without a host block (once the engine enqueued
  // it). CPU ops have nothing on a stream: this waits for them on the host. The running engine
  // may enqueue the work on this thread (Note [Caller-run cycles]).
  return guarded([&] {
    auto h = findHandle(handle);
    auto e = h->streamReady() ? nullptr : currentEngine();
    capi::streamWait(e.get(), *h, stream);
  });
}

perseus_status perseus_release(perseus_handle handle) {
  return guarded([&] {
    if (!capi::runtime().handles.release(handle)) {
      throw InvalidArgumentError(
          PERSEUS_STR("perseus_release: handle " << handle << " is unknown or already released"));
    }
  });
}

perseus_status perseus_add_process_set(const int32_t* ranks, int32_t count, int32_t* id) {
  return guarded([&] {
    if (ranks == nullptr || count < 1 || id == nullptr) {
      throw InvalidArgumentError(
          "perseus_add_process_set: give a non-empty rank list and an id pointer");
    }
    auto e = capi::requireEngine();
    auto h = e->addProcessSet(std::vector<int>(ranks, ranks + count));
    *id = waitOk(h, e->params().spin_us)->intResult();
  });
}

perseus_status perseus_remove_process_set(int32_t id) {
  return guarded([&] {
    auto e = capi::requireEngine();
    waitOk(e->removeProcessSet(id), e->params().spin_us);
  });
}

perseus_status perseus_process_set_info(int32_t id, int32_t* rank_in_set, int32_t* size) {
  return guarded([&] {
    auto info = capi::requireEngine()->processSet(id);
    if (!info) throw InvalidArgumentError(PERSEUS_STR("process set " << id << " does not exist"));
    if (rank_in_set) *rank_in_set = info->rank;
    if (size) *size = static_cast<int32_t>(info->members.size());
  });
}

perseus_status perseus_process_set_ranks(int32_t id, int32_t* ranks, int32_t capacity,
                                         int32_t* count) {
  return guarded([&] {
    auto info = capi::requireEngine()->processSet(id);
    if (!info) throw InvalidArgumentError(PERSEUS_STR("process set " << id << " does not exist"));
    if (capacity > 0 && ranks == nullptr)
      throw InvalidArgumentError("perseus_process_set_ranks: ranks is NULL");
    for (int32_t i = 0; i < capacity && i < static_cast<int32_t>(info->members.size()); ++i) {
      ranks[i] = info->members[i];
    }
    if (count) *count = static_cast<int32_t>(info->members.size());
  });
}

}  // extern "C"
