// Engine construction and submission (any thread): the one submission path (submit(): the
// post path or negotiation), validation, the device, queueing a request. The collectives' entry
// points that build the requests are in collective_calls.cc; the engine thread's loop, caller-run
// cycles, waiting for a handle and shutdown in driver.cc; the cycle itself in cycle.cc, running its
// responses in execute.cc, and completing or failing handles in completion.cc.
#include "engine/engine.h"

#include <algorithm>
#include <numeric>

#include "common/logging.h"

namespace perseus::engine {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

Engine::Engine(const rendezvous::Topology& topology, transport::Transport* transport,
               transport::ShmArena* arena, const Params& params)
    : topology_(topology),
      transport_(transport),
      arena_(arena),
      params_(params),
      cpu_executor_(makeCpuExecutor()),
      // Posted operations have no timeline spans: with a timeline, everything is negotiated.
      posted_(params.timeline.empty() ? arena : nullptr, transport, params) {
  PERSEUS_CHECK(transport_ != nullptr, "engine without a transport");
  const int rank = transport_->rank();
  const int size = transport_->size();
  std::vector<int> all(size);
  std::iota(all.begin(), all.end(), 0);
  // Without rendezvous information (tests, one host) every rank is local.
  std::vector<int> local = topology.local_ranks.empty() ? all : topology.local_ranks;
  std::vector<int> cross =
      topology.cross_ranks.empty() ? std::vector<int>{rank} : topology.cross_ranks;
  const size_t capacity = static_cast<size_t>(std::max<int64_t>(params.cache_capacity, 0));
  auto add = [&](int32_t id, int group, std::vector<int> members) {
    auto set = std::make_unique<ProcessSet>(id, group, members, rank, capacity);
    if (set->member()) set->comm = makeComm(*set);
    set_info_[id] = ProcessSetInfo{id, members, set->rank};
    sets_[group] = std::move(set);
  };
  add(kGlobalSet, kGlobalGroup, all);
  add(kLocalSet, kLocalGroup, local);
  add(kCrossSet, kCrossGroup, cross);
  gpu_ = backends::createGpuBackend({params, rank, topology.hostnames});
  if (gpu_) gpu_executor_ = makeGpuExecutor(gpu_.get(), [this] { return joinedDevice(); });
  // DYNAMIC (Horovod's value) arms the timeline for startTimeline() only.
  if (!params.timeline.empty() && params.timeline != "DYNAMIC") {
    timeline_ =
        std::make_unique<Timeline>(Timeline::pathForRank(params.timeline, rank, size), rank);
    mark_cycles_ = params.timeline_mark_cycles;
  }
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() { shutdown(); }

std::unique_ptr<collectives::Communicator> Engine::makeComm(const ProcessSet& set) {
  return std::make_unique<collectives::Communicator>(transport_, arena_, set.members, set.group_id,
                                                     params_);
}

// --- submission ------------------------------------------------------------------------

std::optional<ProcessSetInfo> Engine::processSet(int32_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = set_info_.find(id);
  if (it == set_info_.end()) return std::nullopt;
  return it->second;
}

void Engine::validateSet(Entry& e) const {
  const Request& q = e.request;
  // Built only for an error message: this runs under mu_ for every submission.
  auto what = [&q] { return PERSEUS_STR(opTypeName(q.op) << " '" << q.name << "'"); };
  if (q.name.empty())
    throw InvalidArgumentError(std::string(opTypeName(q.op)) +
                               ": empty name; give every collective a name");
  auto it = set_info_.find(q.process_set);
  if (it == set_info_.end()) {
    throw InvalidArgumentError(PERSEUS_STR(what()
                                           << ": process set " << q.process_set
                                           << " does not exist; create it with add_process_set"));
  }
  const ProcessSetInfo* info = &it->second;  // no copy: mu_ is held
  if (info->rank < 0) {
    throw InvalidArgumentError(
        PERSEUS_STR(what() << ": rank " << transport_->rank() << " is not a member of process set "
                           << q.process_set << " (members " << rankVector(info->members) << ")"));
  }
  const int n = static_cast<int>(info->members.size());
  for (size_t i = 0; i < q.tensors.size(); ++i) {
    const TensorMeta& t = q.tensors[i];
    for (int64_t d : t.shape) {
      if (d < 0)
        throw InvalidArgumentError(
            PERSEUS_STR(what() << ": negative dimension in shape " << shapeString(t.shape)));
    }
    if (e.inputs[i] == nullptr && t.numElements() > 0) {
      throw InvalidArgumentError(PERSEUS_STR(what() << ": input " << i << " is null"));
    }
    bool needs_dim0 =
        q.op == OpType::kAllgather || q.op == OpType::kAlltoall || q.op == OpType::kReducescatter;
    if (needs_dim0 && t.shape.empty()) {
      throw InvalidArgumentError(PERSEUS_STR(what() << ": a scalar has no first dimension to "
                                                       "split or concatenate; reshape it to [1]"));
    }
  }
  if (q.op == OpType::kBroadcast && (q.root < 0 || q.root >= n)) {
    throw InvalidArgumentError(PERSEUS_STR(what() << ": root rank " << q.root
                                                  << " is outside the process set of size " << n));
  }
  if (q.op == OpType::kAlltoall) {
    const int64_t rows = q.tensors[0].shape[0];
    if (e.splits.empty()) {
      if (rows % n != 0) {
        throw InvalidArgumentError(PERSEUS_STR(what() << ": first dimension " << rows
                                                      << " does not divide by the set size " << n
                                                      << "; pass splits"));
      }
    } else {
      if (static_cast<int>(e.splits.size()) != n) {
        throw InvalidArgumentError(PERSEUS_STR(what() << ": " << e.splits.size()
                                                      << " splits for a set of " << n << " ranks"));
      }
      int64_t sum = 0;
      for (int64_t s : e.splits) {
        if (s < 0) throw InvalidArgumentError(PERSEUS_STR(what() << ": negative split " << s));
        sum += s;
      }
      if (sum != rows) {
        throw InvalidArgumentError(PERSEUS_STR(what() << ": splits sum to " << sum
                                                      << " but the first dimension is " << rows));
      }
    }
  }
}

void Engine::prepareDevice(Entry& e) {
  if (e.device < 0) return;
  const std::string what = PERSEUS_STR(opTypeName(e.request.op) << " '" << e.request.name << "'");
  if (!gpu_) {
    throw UnsupportedError(
        PERSEUS_STR(what << ": tensors on CUDA device " << e.device
                         << " need a build with CUDA and NCCL (PERSEUS_WITH_CUDA=ON); "
                            "this build is CPU-only: copy the tensor to the CPU or "
                            "install a CUDA build"));
  }
  int expected = -1;
  if (!gpu_device_.compare_exchange_strong(expected, e.device) && expected != e.device) {
    throw InvalidArgumentError(PERSEUS_STR(what
                                           << ": tensor on CUDA device " << e.device
                                           << ", but this process already used device " << expected
                                           << "; one process drives one GPU (select it per local "
                                              "rank, e.g. torch.cuda.set_device(local_rank))"));
  }
  // Throws UnsupportedError when the machine has no driver or device.
  e.ready = gpu_->recordReady(e.device, e.cuda_stream);
}

int Engine::joinedDevice() {
  int device = gpu_device_.load();
  if (device >= 0) return device;
  device = join_device_.load();
  if (device < 0) device = gpu_->defaultDevice(topology_.local_rank);
  // From now on this process drives that GPU, as if it had submitted a tensor there.
  int expected = -1;
  gpu_device_.compare_exchange_strong(expected, device);
  return gpu_device_.load();
}

DuplicateNameError Engine::duplicateName(OpType op, const std::string& name, int32_t set) const {
  return DuplicateNameError(PERSEUS_STR(opTypeName(op)
                                        << " '" << name
                                        << "': a collective with this name is still in flight in "
                                           "process set "
                                        << set << " on rank " << transport_->rank()
                                        << "; wait for it or give this one another name"));
}

namespace {

// One process drives one device per call: a grouped call's tensors share it.
void addTensor(Entry& e, const TensorView& t) {
  if (!e.inputs.empty() && t.device != e.device) {
    throw InvalidArgumentError(PERSEUS_STR(
        opTypeName(e.request.op) << " '" << e.request.name << "': tensors on devices " << e.device
                                 << " and " << t.device << " in one call; submit them separately"));
  }
  e.request.tensors.push_back({t.dtype, std::vector<int64_t>(t.shape, t.shape + t.ndim)});
  e.inputs.push_back(t.data);
  e.device = t.device;
  e.cuda_stream = t.cuda_stream;
  e.request.device_kind = t.device >= 0 ? DeviceKind::kCuda : DeviceKind::kCpu;
}

// The call as the request the engine negotiates: the first allocation on its way.
std::unique_ptr<Entry> entryOf(const Call& c) {
  auto e = std::make_unique<Entry>();
  Request& q = e->request;
  q.op = c.op;
  q.name.assign(c.name.data(), c.name.size());
  q.process_set = c.set;
  q.reduce_op = c.reduce_op;
  q.prescale = c.prescale;
  q.postscale = c.postscale;
  q.root = c.root;
  q.num_splits = static_cast<int32_t>(c.splits.size());
  q.set_ranks.assign(c.set_ranks.begin(), c.set_ranks.end());
  q.set_id = c.set_id;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    addTensor(*e, c.inputs[i]);
    e->outputs.push_back(c.outputs.empty() ? nullptr : c.outputs[i]);
  }
  e->splits.assign(c.splits.begin(), c.splits.end());
  return e;
}

}  // namespace

std::shared_ptr<Handle> Engine::submit(const Call& c) {
  std::shared_ptr<Handle> handle;
  switch (posted_.tryPost(c, &handle)) {
    case PostedCollectives::Outcome::kFinished:
      return nullptr;
    case PostedCollectives::Outcome::kClosed: {
      // stopAll() recorded why before it closed the post board.
      const Submissions::Stop stop = submissions_.stopCause();
      throw Error(stop.code,
                  PERSEUS_STR(opTypeName(c.op) << " '" << c.name << "' failed: " << stop.message));
    }
    case PostedCollectives::Outcome::kInFlight:
      throw duplicateName(c.op, std::string(c.name), c.set);
    case PostedCollectives::Outcome::kPosted:
      progressPosted(*handle);  // the other ranks may have posted already
      break;
    case PostedCollectives::Outcome::kNotPosted:
      handle = queue(entryOf(c));
      break;
  }
  if (c.blocking) {
    waitFor(*handle, -1, params_.spin_us);
    if (handle->status() != StatusCode::kOk) throw Error(handle->status(), handle->message());
  }
  return handle;
}

std::shared_ptr<Handle> Engine::queue(std::unique_ptr<Entry> e) {
  e->submitted = Clock::now();
  prepareDevice(*e);
  Submissions::Stop stop = submissions_.stopCause();
  if (!stop.stopped()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      validateSet(*e);
    }
    e->handle = Handle::create(e->request.name);
    auto handle = e->handle;
    switch (submissions_.submit(e, true, &stop)) {
      case Submissions::Outcome::kQueued:
        wakeEngine();
        return handle;
      case Submissions::Outcome::kDuplicate:
        throw duplicateName(e->request.op, e->request.name, e->request.process_set);
      case Submissions::Outcome::kClaimed:
        PERSEUS_CHECK(false, "a submission asked to be queued was only claimed");
        break;
      case Submissions::Outcome::kStopped:
        break;
    }
  }
  if (!e->handle) e->handle = Handle::create(e->request.name);
  e->handle->complete(stop.code,
                      PERSEUS_STR(opTypeName(e->request.op)
                                  << " '" << e->request.name << "' was not run: " << stop.message));
  return e->handle;
}

void Engine::enqueue(std::unique_ptr<Entry> e, bool from_post) {
  Submissions::Stop stop;
  switch (submissions_.queue(e, from_post, &stop)) {
    case Submissions::Outcome::kQueued:
      wakeEngine();
      return;
    case Submissions::Outcome::kDuplicate:
      stop.code = StatusCode::kDuplicateName;
      stop.message = duplicateName(e->request.op, e->request.name, e->request.process_set).what();
      break;
    default:
      break;
  }
  e->handle->complete(stop.code,
                      PERSEUS_STR(opTypeName(e->request.op)
                                  << " '" << e->request.name << "' failed: " << stop.message));
}

Engine::Stats Engine::stats() const {
  constexpr auto r = std::memory_order_relaxed;
  Stats s;
  s.cycles = cycles_.load(r);
  s.control_exchanges = control_exchanges_.load(r);
  s.control_bytes = control_bytes_.load(r);
  s.coordinator_rounds = coordinator_rounds_.load(r);
  s.cached_responses = cached_responses_.load(r);
  s.coordinated_responses = coordinated_responses_.load(r);
  s.negotiation_ns = negotiation_ns_.load(r);
  s.posted_allreduces = posted_.completedAllreducePosts();
  s.posted_collectives = posted_.completedPosts();
  return s;
}

std::string Engine::lastStallWarning() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_stall_warning_;
}

// --- engine thread -------------------------------------------------------------------------

bool Engine::drainQueue() {
  if (!submissions_.hasQueued()) return false;
  std::vector<std::unique_ptr<Entry>> batch = submissions_.drain();
  auto failQueued = [this](Entry* raw, StatusCode code, const std::string& message) {
    submissions_.release(raw->request.process_set, raw->request.name);
    raw->handle->complete(code, message);
  };
  for (auto& e : batch) {
    Entry* raw = e.get();
    // The set exists: submit() checked it, and sets are removed only on this thread, which
    // fails a removed set's queue entries below.
    ProcessSet* set = setById(raw->request.process_set);
    if (set == nullptr) {
      failQueued(
          raw, StatusCode::kInvalidArgument,
          PERSEUS_STR(opTypeName(raw->request.op) << " '" << raw->request.name << "': process set "
                                                  << raw->request.process_set << " was removed"));
      continue;
    }
    if (std::optional<std::string> failure = takeConflict(*set, raw->request)) {
      failQueued(raw, StatusCode::kMismatch, *failure);
      continue;
    }
    set->entries[raw->request.name] = std::move(e);
    set->fresh.push_back(raw);
  }
  return !batch.empty();
}

ProcessSet* Engine::setById(int32_t id) {
  for (auto& [group, set] : sets_) {
    if (set->id == id) return set.get();
  }
  return nullptr;
}

}  // namespace perseus::engine
