// Engine construction (the parts' wiring) and submission (any thread): the one submission path
// (submit(): the post lane or negotiation), validation, the device, queueing a request. The
// collectives' entry points that build the calls are in collective_calls.cc; the parts are
// Submissions, Cycle (cycle.h), Driver (driver.h), GpuCompletion and the post lane (FastPath,
// built here as PostedCollectives: the one place outside posted/ that knows the lane's class).
#include "engine/engine.h"

#include <algorithm>

#include "common/logging.h"
#include "engine/posted/posted_collectives.h"

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
      gpu_(backends::createGpuBackend(
          {params, transport ? transport->rank() : 0, topology.hostnames})),
      // Posted operations have no timeline spans: with a timeline, everything is negotiated.
      fast_path_(std::make_unique<PostedCollectives>(
          params.timeline.empty() ? arena : nullptr, transport, params,
          [this](std::unique_ptr<Entry> e) { requeue(std::move(e)); })),
      directory_(transport ? transport->rank() : 0),
      stall_report_(transport ? transport->rank() : 0, params.stall_diagnosis_s),
      cycle_(cycleParts(), cycleListener()),
      driver_(driverParts()) {
  driver_.start();
}

Engine::~Engine() { shutdown(); }

Cycle::Parts Engine::cycleParts() {
  Cycle::Parts p;
  p.topology = topology_;
  p.transport = transport_;
  p.arena = arena_;
  p.params = params_;
  p.submissions = &submissions_;
  p.fast_path = fast_path_.get();
  p.gpu_completion = &gpu_completion_;
  p.gpu = gpu_.get();
  p.cpu_executor = makeCpuExecutor();
  if (gpu_) p.gpu_executor = makeGpuExecutor(gpu_.get(), [this] { return joinedDevice(); });
  return p;
}

Cycle::Listener Engine::cycleListener() {
  Cycle::Listener l;
  l.set_added = [this](const ProcessSetInfo& info) { directory_.added(info); };
  l.set_removed = [this](int32_t id) {
    directory_.removed(id);
    submissions_.forgetSet(id);
  };
  l.stall_warning = [this](const std::string& text) { directory_.setStallWarning(text); };
  l.stall_notices = [this](const std::vector<StallNotice>& n) { stall_report_.report(n); };
  return l;
}

Driver::Parts Engine::driverParts() {
  Driver::Parts p;
  p.transport = transport_;
  p.params = &params_;
  p.submissions = &submissions_;
  p.fast_path = fast_path_.get();
  p.cycle = &cycle_;
  p.gpu_device = &gpu_device_;
  p.gpu = gpu_.get();
  return p;
}

// --- submission ------------------------------------------------------------------------

std::optional<ProcessSetInfo> Engine::processSet(int32_t id) const { return directory_.find(id); }

void Engine::prepareDevice(Entry& e) {
  if (e.device < 0) return;
  // Built only for an error: this runs for every CUDA op, and a stream costs about a microsecond.
  auto what = [&e] {
    return PERSEUS_STR(opTypeName(e.request.op) << " '" << e.request.name << "'");
  };
  if (!gpu_) {
    throw UnsupportedError(
        PERSEUS_STR(what() << ": tensors on CUDA device " << e.device
                           << " need a build with CUDA and NCCL (PERSEUS_WITH_CUDA=ON); "
                              "this build is CPU-only: copy the tensor to the CPU or "
                              "install a CUDA build"));
  }
  int expected = -1;
  if (!gpu_device_.compare_exchange_strong(expected, e.device) && expected != e.device) {
    throw InvalidArgumentError(PERSEUS_STR(what()
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

// The call as the request the engine negotiates: the first allocation on its way. A new entry
// per call, on purpose: recycling completed entries saved six allocations a call but doubled
// the page faults of DDP's training thread under glibc's default heap trimming
// (bench/results/ddp_entry_recycling_ab.txt).
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
  std::shared_ptr<Handle> handle = post(c);
  if (c.blocking && handle) {
    waitFor(*handle, -1, params_.spin_us);
    if (handle->status() != StatusCode::kOk) throw Error(handle->status(), handle->message());
  }
  return handle;
}

std::shared_ptr<Handle> Engine::post(const Call& c) {
  std::shared_ptr<Handle> handle;
  const FastPath::PostResult posted = fast_path_->tryPost(c, &handle);
  switch (posted) {
    case FastPath::PostResult::kFinished:
      return nullptr;
    case FastPath::PostResult::kClosed:
    case FastPath::PostResult::kInFlight:
    case FastPath::PostResult::kOpened:  // only for a Call::opened, which open() offers
      refused(c.op, c.name, posted);
    case FastPath::PostResult::kPosted:
      fast_path_->progress(*handle);  // the other ranks may have posted already
      break;
    case FastPath::PostResult::kNotPosted:
      handle = queue(entryOf(c));
      break;
  }
  return handle;
}

void Engine::refused(OpType op, std::string_view name, FastPath::PostResult why) const {
  if (why == FastPath::PostResult::kInFlight)
    throw duplicateName(op, std::string(name), kGlobalSet);
  PERSEUS_CHECK(why == FastPath::PostResult::kClosed, "a post lane result with no error");
  // stopAll() recorded why before it closed the post board.
  const Submissions::Stop stop = submissions_.stopCause();
  throw Error(stop.code,
              PERSEUS_STR(opTypeName(op) << " '" << name << "' failed: " << stop.message));
}

bool Engine::open(const Call& c) {
  std::shared_ptr<Handle> handle;
  const FastPath::PostResult posted = fast_path_->tryPost(c, &handle);
  if (posted == FastPath::PostResult::kOpened) return true;
  if (posted == FastPath::PostResult::kNotPosted) return false;
  refused(c.op, c.name, posted);
}

std::shared_ptr<Handle> Engine::finishOpened(const OpenedPost& opened, void* out) {
  std::shared_ptr<Handle> handle;
  const FastPath::PostResult posted = fast_path_->finishOpened(opened, out, &handle);
  if (posted == FastPath::PostResult::kFinished) return nullptr;
  if (posted != FastPath::PostResult::kPosted) refused(opened.op, opened.name, posted);
  fast_path_->progress(*handle);
  return handle;
}

std::shared_ptr<Handle> Engine::queue(std::unique_ptr<Entry> e) {
  e->submitted = Clock::now();
  prepareDevice(*e);
  Submissions::Stop stop = submissions_.stopCause();
  if (!stop.stopped()) {
    directory_.validate(*e);
    e->handle = Handle::create(e->request.name);
    auto handle = e->handle;
    switch (submissions_.submit(e, true, &stop)) {
      case Submissions::Admission::kQueued:
        wakeEngine();
        return handle;
      case Submissions::Admission::kDuplicate:
        throw duplicateName(e->request.op, e->request.name, e->request.process_set);
      case Submissions::Admission::kClaimed:
        PERSEUS_CHECK(false, "a submission asked to be queued was only claimed");
        break;
      case Submissions::Admission::kStopped:
        break;
    }
  }
  if (!e->handle) e->handle = Handle::create(e->request.name);
  e->handle->complete(stop.code,
                      PERSEUS_STR(opTypeName(e->request.op)
                                  << " '" << e->request.name << "' was not run: " << stop.message));
  return e->handle;
}

void Engine::requeue(std::unique_ptr<Entry> e) {
  Submissions::Stop stop;
  switch (submissions_.queue(e, true, &stop)) {
    case Submissions::Admission::kQueued:
      wakeEngine();
      return;
    case Submissions::Admission::kDuplicate:
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
  Stats s;
  static_cast<Cycle::Stats&>(s) = cycle_.stats();
  const FastPath::Counts posts = fast_path_->counts();
  s.posted_allreduces = posts.allreduces;
  s.posted_collectives = posts.collectives;
  return s;
}

}  // namespace perseus::engine
