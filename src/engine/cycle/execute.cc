// Running a set's negotiated responses: fusion plan, executor per group, completion.
// Holder of the cycle lock only (cycle.h).
#include <algorithm>

#include "common/logging.h"
#include "engine/cycle/cycle.h"

namespace perseus::engine {
namespace {
using Clock = std::chrono::steady_clock;

bool isData(OpType op) {
  return op == OpType::kAllreduce || op == OpType::kAllgather || op == OpType::kBroadcast ||
         op == OpType::kAlltoall || op == OpType::kReducescatter;
}

// Into `entries` (storage the caller reuses): this rank's entry of each response (null where it
// takes part without one), each expecting all of its response's tensors.
void matchEntries(ProcessSet& set, const std::vector<Response>& responses,
                  std::vector<Entry*>* entries) {
  entries->assign(responses.size(), nullptr);
  for (size_t i = 0; i < responses.size(); ++i) {
    auto it = set.entries.find(responses[i].name);
    if (it != set.entries.end()) {
      (*entries)[i] = it->second.get();
      (*entries)[i]->tensors_left = responses[i].tensors.size();
    }
  }
}

// The global set's responses, before any of their entries completes (Note [Posted
// collectives]). Every rank decides from the same negotiation, so all give the same names slots.
void learnPosts(FastPath& fast_path, const ProcessSet& set, const std::vector<Response>& responses,
                const std::vector<Entry*>& entries) {
  const bool may_add = !set.any_joined && !set.posts_refused;
  for (size_t i = 0; i < responses.size(); ++i)
    fast_path.learn(responses[i], may_add, entries[i] ? entries[i]->handle : nullptr);
}

// A group's collective failed for the whole job (a lost peer, a timeout, a shutdown): the
// error again, naming the group's tensors, for the message that reaches every handle.
[[noreturn]] void rethrowNamingTensors(const Error& e, const ProcessSet& set, const FusionGroup& g,
                                       const std::vector<Response>& responses) {
  std::string names;
  for (size_t i = 0; i < g.items.size() && i < 4; ++i)
    names += PERSEUS_STR((i ? ", '" : "'") << responses[g.items[i].response].name << "'");
  const std::string what =
      PERSEUS_STR(e.what() << " [while running " << opTypeName(responses[g.items[0].response].op)
                           << " of " << names << " in process set " << set.id << "]");
  if (e.code() == StatusCode::kPeerLost)
    throw PeerLostError(static_cast<const PeerLostError&>(e).rank(), what);
  if (e.code() == StatusCode::kTimeout) throw TimeoutError(what);
  throw ShutDownError(what);
}

bool failsTheJob(const Error& e) {
  return e.code() == StatusCode::kPeerLost || e.code() == StatusCode::kTimeout ||
         e.code() == StatusCode::kShutDown;
}

// A local error before any byte moved (e.g. an unsupported dtype), which every rank sees: each
// entry of the group fails with it.
void failEntries(const Error& e, const FusionGroup& g, const std::vector<Response>& responses,
                 const std::vector<Entry*>& entries) {
  const OpType op = responses[g.items[0].response].op;
  for (const FusionItem& it : g.items) {
    if (Entry* en = entries[it.response]) {
      en->error = e.code();
      en->error_message =
          PERSEUS_STR(opTypeName(op) << " '" << en->request.name << "': " << e.what());
    }
  }
}

}  // namespace

void Cycle::execute(ProcessSet& set, std::vector<Response>& responses) {
  if (responses.empty()) return;
  // The scratch vector is taken, not borrowed: a nested execute() would allocate its own.
  std::vector<Entry*> entries = std::move(entries_scratch_);
  matchEntries(set, responses, &entries);
  if (set.group_id == kGlobalGroup && fast_path_.enabled())
    learnPosts(fast_path_, set, responses, entries);
  const auto negotiated = timeline_ ? Clock::now() : Clock::time_point{};
  std::string stop_message;  // set by a stall-shutdown response: the job stops after this list
  for (const FusionGroup& g :
       fusion::planGroups(responses, set.comm->size(), params_.fusion_threshold)) {
    const Response& first = responses[g.items[0].response];
    if (first.is_error || !isData(first.op)) {
      if (first.is_error && first.error_code == StatusCode::kTimeout)
        stop_message = first.error_message;
      executeControl(set, first, entries[g.items[0].response]);
      continue;
    }
    if (timeline_) {
      for (const FusionItem& it : g.items)
        timeline_->span(responses[it.response].name, "QUEUE", negotiated, Clock::now());
    }
    try {
      // Every rank submitted CUDA tensors (negotiated), so this rank's submission found a
      // backend (Engine::prepareDevice).
      const bool cuda = first.device_kind == DeviceKind::kCuda;
      PERSEUS_CHECK(!cuda || gpu_executor_ != nullptr, "CUDA response without a GPU backend");
      Executor& executor = cuda ? *gpu_executor_ : *cpu_executor_;
      executor.run(g, responses, entries, *set.comm, set.fusion, timeline_.get());
    } catch (const Error& e) {
      if (failsTheJob(e)) rethrowNamingTensors(e, set, g, responses);
      failEntries(e, g, responses, entries);
    }
    for (const FusionItem& it : g.items) {
      Entry* e = entries[it.response];
      if (e == nullptr || --e->tensors_left > 0) continue;
      entries[it.response] = nullptr;
      if (!e->gpu_works.empty()) {
        finishGpu(set, e);
      } else {
        done_scratch_.push_back(e);
      }
    }
    finishGroup(set, done_scratch_.data(), done_scratch_.size());
    done_scratch_.clear();
  }
  entries_scratch_ = std::move(entries);
  if (!stop_message.empty()) breakEngine(TimeoutError(stop_message), "stall inspection");
}

void Cycle::executeControl(ProcessSet& set, const Response& r, Entry* e) {
  if (r.is_error) {
    if (e) finish(set, e, r.error_code, r.error_message);
    return;
  }
  switch (r.op) {
    case OpType::kBarrier:
      if (e) finish(set, e, StatusCode::kOk, "");
      return;
    case OpType::kJoin:
      set.joined = false;
      if (e) {
        e->handle->setIntResult(r.last_joined_rank);
        finish(set, e, StatusCode::kOk, "");
      }
      return;
    case OpType::kAddProcessSet:
      return addSet(r, e);
    case OpType::kRemoveProcessSet:
      return removeSet(r, e);
    default:
      PERSEUS_CHECK(false, "unexpected control response " << opTypeName(r.op));
  }
}

void Cycle::addSet(const Response& r, Entry* e) {
  // Every rank runs this response in the same place, so all get the same ids.
  ProcessSet* set = sets_.add(std::vector<int>(r.set_ranks.begin(), r.set_ranks.end()));
  if (e == nullptr) return;
  if (set == nullptr) {
    finish(sets_.global(), e, StatusCode::kInvalidArgument,
           PERSEUS_STR("add_process_set: "
                       << ProcessSetTable::kMaxAddedSets
                       << " process sets exist already, the most a job can have at once; "
                          "remove one it no longer needs (remove_process_set) first"));
    return;
  }
  e->handle->setIntResult(set->id);
  finish(sets_.global(), e, StatusCode::kOk, "");
}

void Cycle::removeSet(const Response& r, Entry* e) {
  ProcessSet* set = r.set_id >= 1 ? sets_.byId(r.set_id) : nullptr;
  if (set != nullptr) {
    while (!set->entries.empty()) {
      Entry* pending = set->entries.begin()->second.get();
      finish(*set, pending, StatusCode::kInvalidArgument,
             PERSEUS_STR(opTypeName(pending->request.op)
                         << " '" << pending->request.name << "': process set " << set->id
                         << " was removed while it was pending"));
    }
    sets_.remove(r.set_id);
  }
  if (e) finish(sets_.global(), e, StatusCode::kOk, "");
}

}  // namespace perseus::engine
