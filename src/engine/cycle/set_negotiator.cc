#include "engine/cycle/set_negotiator.h"

#include <algorithm>
#include <iterator>
#include <sstream>

#include "common/logging.h"
#include "negotiation/control.h"
#include "negotiation/wire.h"

namespace perseus::engine {

double stallAttentionSeconds(const Params& params) {
  return params.stall_diagnosis_s > 0 ? std::min(params.stall_warning_s, params.stall_diagnosis_s)
                                      : params.stall_warning_s;
}

SetNegotiator::SetNegotiator(const Params& params, ProcessSetTable& sets, CrossSetNames& cross_set,
                             const FastPath& posted, StallWarning stall_warning,
                             StallNotices stall_notices, std::vector<std::string> hostnames)
    : params_(params),
      sets_(sets),
      cross_set_(cross_set),
      posted_(posted),
      stall_warning_(std::move(stall_warning)),
      stall_notices_(std::move(stall_notices)),
      hostnames_(std::move(hostnames)) {
  if (params.straggler_threshold > 0) {
    straggler_ = std::make_unique<StragglerWatch>(params.straggler_threshold, hostnames_);
  }
}

void SetNegotiator::classifyFresh(ProcessSet& set, Clock::time_point now,
                                  std::vector<int>* invalid_bits) {
  for (Entry* e : set.fresh) {
    if (e->request.op == OpType::kJoin) set.joined = true;
    ResponseCache::Result hit = set.cache.lookup(e->request);
    if (hit.state == ResponseCache::Lookup::kHit) {
      e->cache_bit = hit.bit;
      continue;
    }
    if (hit.state == ResponseCache::Lookup::kInvalid) invalid_bits->push_back(hit.bit);
    set.uncached.push_back(e);
  }
  set.fresh.clear();
  // A cached request that waits too long goes to the coordinator, whose stall inspector
  // knows which ranks are missing (invalidating the bit moves every rank's copy there).
  const double attention_s = stallAttentionSeconds(params_);
  for (auto& [name, e] : set.entries) {
    if (e->cache_bit >= 0 && !e->stall_reported &&
        std::chrono::duration<double>(now - e->submitted).count() > attention_s) {
      e->stall_reported = true;
      invalid_bits->push_back(e->cache_bit);
    }
  }
}

namespace {

// Sends `e` back to the coordinator: its cached response no longer holds.
void returnToCoordinator(ProcessSet& set, Entry* e) {
  e->cache_bit = -1;
  e->announced = false;  // to the cross-set check as well (CrossSetNames::announce)
  set.uncached.push_back(e);
}

}  // namespace

SetNegotiator::Agreement SetNegotiator::negotiate(ProcessSet& set, bool global, bool shutdown,
                                                  Timeline* timeline) {
  Agreement out;
  std::vector<int> invalid_bits;
  const auto now = Clock::now();
  classifyFresh(set, now, &invalid_bits);
  std::vector<Request> announced;  // other sets' new requests, for the cross-set check
  if (global) announced = cross_set_.announce();

  ControlVector& cv = describeThisRank(set, global, shutdown, now, invalid_bits, announced);
  exchangeControl(set, &cv);
  set.any_joined = cv.anyFlag(ControlFlag::kJoined);
  if (global && !learnJobFacts(set, shutdown, cv, &out)) return out;
  dropInvalidated(set, cv);

  out.responses = std::move(set.agreed);
  takeCachedResponses(set, cv, &out.responses);
  const size_t cached = out.responses.size();
  if (cv.anyFlag(ControlFlag::kUncached)) {
    std::vector<Response> fresh = coordinateUncached(set, global, announced);
    out.responses.insert(out.responses.end(), std::make_move_iterator(fresh.begin()),
                         std::make_move_iterator(fresh.end()));
  }
  out.more_work = !set.uncached.empty();
  cached_responses_.fetch_add(cached, std::memory_order_relaxed);
  const auto agreed = Clock::now();
  negotiation_ns_.fetch_add(
      static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(agreed - now).count()),
      std::memory_order_relaxed);
  recordWaits(set, global, out.responses, timeline, agreed);
  return out;
}

ControlVector& SetNegotiator::describeThisRank(ProcessSet& set, bool global, bool shutdown,
                                               Clock::time_point now,
                                               const std::vector<int>& invalid_bits,
                                               const std::vector<Request>& announced) {
  ControlVector& cv = set.control;
  cv.reset(set.cache.numBits());
  bool stall_check_due =
      set.coordinator && set.coordinator->numWaiting() > 0 && now >= set.next_stall_check;
  if (!set.uncached.empty() || stall_check_due || !announced.empty()) {
    cv.setFlag(ControlFlag::kUncached);
  }
  if (global && shutdown) cv.setFlag(ControlFlag::kShutdown);
  if (set.joined) cv.setFlag(ControlFlag::kJoined);
  if (global && !posted_.enabled()) cv.setFlag(ControlFlag::kNoPosts);
  if (global && straggler_ && set.rank == 0 && straggler_->windowDue(now)) {
    cv.setFlag(ControlFlag::kStragglerWindow);
  }
  if (!invalid_bits.empty()) cv.setFlag(ControlFlag::kInvalid);
  for (int b : invalid_bits) cv.setInvalid(b);
  if (global) {
    for (auto& [group, other] : sets_) {
      if (group != kGlobalGroup && other->member() && other->hasWork()) cv.setSetWork(group);
    }
  }
  markReady(set, &cv);
  return cv;
}

void SetNegotiator::markReady(ProcessSet& set, ControlVector* cv) {
  for (auto& [name, e] : set.entries) {
    if (e->cache_bit >= 0) cv->setReady(e->cache_bit);
  }
  if (set.joined) {
    // A joined rank agrees to every cached allreduce: it will contribute zeros.
    for (int b = 0; b < set.cache.numBits(); ++b) {
      if (set.cache.has(b) && set.cache.response(b).op == OpType::kAllreduce) cv->setReady(b);
    }
  }
}

void SetNegotiator::exchangeControl(ProcessSet& set, ControlVector* cv) {
  PERSEUS_LOG(TRACE, kEngine) << "set " << set.id << ": control with " << set.entries.size()
                              << " entries, " << set.uncached.size() << " uncached";
  allreduceAnd(*set.comm, cv->data(), cv->numWords());
  control_exchanges_.fetch_add(1, std::memory_order_relaxed);
  control_bytes_.fetch_add(cv->numWords() * sizeof(uint64_t), std::memory_order_relaxed);
  PERSEUS_LOG(TRACE, kEngine) << "set " << set.id
                              << ": control done, uncached=" << cv->anyFlag(ControlFlag::kUncached);
}

bool SetNegotiator::learnJobFacts(ProcessSet& set, bool shutdown, const ControlVector& cv,
                                  Agreement* out) {
  if (cv.anyFlag(ControlFlag::kNoPosts)) set.posts_refused = true;
  if (cv.anyFlag(ControlFlag::kShutdown)) {
    out->shutdown = true;
    out->leaving = ranksThatSaid(*set.comm, shutdown);  // so the others can name them
    return false;
  }
  sets_with_work_ = cv.setsWithWork();
  if (straggler_ && cv.anyFlag(ControlFlag::kStragglerWindow)) straggler_->exchange(*set.comm);
  return true;
}

void SetNegotiator::dropInvalidated(ProcessSet& set, const ControlVector& cv) {
  if (cv.anyFlag(ControlFlag::kInvalid)) {
    for (int b = 0; b < cv.numBits(); ++b) {
      if (!cv.invalid(b)) continue;
      for (auto& [name, e] : set.entries) {
        if (e->cache_bit == b) returnToCoordinator(set, e.get());
      }
      set.cache.erase(b);
    }
  }
  if (cv.anyFlag(ControlFlag::kJoined) && !set.joined) {
    // Only cached allreduces take joined ranks into account; the others go to the
    // coordinator, which gives allgather its new row counts and refuses what cannot run.
    for (auto& [name, e] : set.entries) {
      if (e->cache_bit >= 0 && e->request.op != OpType::kAllreduce)
        returnToCoordinator(set, e.get());
    }
  }
}

void SetNegotiator::takeCachedResponses(ProcessSet& set, const ControlVector& cv,
                                        std::vector<Response>* out) {
  size_t n = 0;
  for (int b = 0; b < cv.numBits(); ++b) {
    if (!cv.ready(b) || cv.invalid(b) || !set.cache.has(b)) continue;
    if (n < out->size()) {
      (*out)[n] = set.cache.response(b);
    } else {
      out->push_back(set.cache.response(b));
    }
    ++n;
    set.cache.touch(b);
  }
  out->resize(n);
  for (Response& r : *out) {
    auto it = set.entries.find(r.name);
    if (it != set.entries.end()) it->second->cache_bit = -1;  // now waiting for execution
  }
}

std::vector<Response> SetNegotiator::coordinateUncached(ProcessSet& set, bool global,
                                                        const std::vector<Request>& announced) {
  std::vector<Request> requests;
  const auto sent_at = Clock::now();
  for (Entry* e : set.uncached) {
    requests.push_back(e->request);
    requests.back().waited_s = std::chrono::duration<double>(sent_at - e->submitted).count();
    e->sent = true;
  }
  set.uncached.clear();
  requests.insert(requests.end(), announced.begin(), announced.end());
  std::vector<Response> fresh = coordinate(set, requests);
  coordinator_rounds_.fetch_add(1, std::memory_order_relaxed);
  coordinated_responses_.fetch_add(fresh.size(), std::memory_order_relaxed);
  if (global) cross_set_.failConflicts(&fresh);
  for (const Response& r : fresh) {
    auto it = set.entries.find(r.name);
    const Request* own = it == set.entries.end() ? nullptr : &it->second->request;
    int evicted = set.cache.put(r, own);
    if (evicted >= 0) {
      PERSEUS_LOG(INFO, kEngine) << "response cache full (PERSEUS_CACHE_CAPACITY="
                                 << params_.cache_capacity
                                 << "): evicted a tensor; raise the "
                                    "capacity if this repeats every step";
      for (auto& [name, e] : set.entries) {
        if (e->cache_bit == evicted) returnToCoordinator(set, e.get());
      }
    }
  }
  return fresh;
}

void SetNegotiator::recordWaits(ProcessSet& set, bool global,
                                const std::vector<Response>& responses, Timeline* timeline,
                                Clock::time_point now) {
  StragglerWatch* watch = global ? straggler_.get() : nullptr;
  if (responses.empty() || (!timeline && !watch)) return;
  for (const Response& r : responses) {
    auto it = set.entries.find(r.name);
    if (it == set.entries.end()) continue;
    if (timeline) timeline->span(r.name, "NEGOTIATE", it->second->submitted, now);
    if (watch && !r.is_error) {
      watch->record(r.name, std::chrono::duration<double>(now - it->second->submitted).count());
    }
  }
}

std::vector<Response> SetNegotiator::coordinate(ProcessSet& set,
                                                const std::vector<Request>& requests) {
  collectives::Communicator& comm = *set.comm;
  const int n = comm.size();
  std::vector<uint8_t> mine = encodeRequests(requests);
  if (comm.rank() != 0) {
    uint64_t len = mine.size();
    comm.exchange({{0, &len, sizeof(len)}, {0, mine.data(), mine.size()}}, {});
    uint64_t out_len = 0;
    comm.exchange({}, {{0, &out_len, sizeof(out_len)}});
    std::vector<uint8_t> out(out_len);
    comm.exchange({}, {{0, out.data(), out.size()}});
    std::vector<StallNotice> notices;
    std::vector<Response> responses = decodeResponses(out, &notices);
    if (!notices.empty() && stall_notices_) stall_notices_(notices);
    return responses;
  }
  std::vector<uint64_t> lens(n, 0);
  std::vector<transport::RecvOp> recvs;
  for (int r = 1; r < n; ++r) recvs.push_back({r, &lens[r], sizeof(uint64_t)});
  comm.exchange({}, recvs);
  std::vector<std::vector<uint8_t>> lists(n);
  recvs.clear();
  for (int r = 1; r < n; ++r) {
    lists[r].resize(lens[r]);
    recvs.push_back({r, lists[r].data(), lists[r].size()});
  }
  comm.exchange({}, recvs);

  Coordinator& coord = *set.coordinator;
  const auto now = Clock::now();
  coord.add(0, cross_set_.check(set, 0, requests), now);
  for (int r = 1; r < n; ++r) coord.add(r, cross_set_.check(set, r, decodeRequests(lists[r])), now);
  std::vector<Response> responses = coord.takeReady();
  PERSEUS_LOG(TRACE, kEngine) << "set " << set.id << ": coordinator has " << responses.size()
                              << " responses, " << coord.numWaiting() << " waiting";
  inspectStalls(set, &responses);
  if (set.group_id == kGlobalGroup) {
    for (Response& c : cross_set_.takeConflicts()) {
      coord.erase(c.name);
      responses.push_back(std::move(c));
    }
  }

  std::vector<StallNotice> notices = std::move(notices_);
  notices_.clear();
  std::vector<uint8_t> out = encodeResponses(responses, notices);
  uint64_t out_len = out.size();
  std::vector<transport::SendOp> sends;
  for (int r = 1; r < n; ++r) {
    sends.push_back({r, &out_len, sizeof(out_len)});
    sends.push_back({r, out.data(), out.size()});
  }
  comm.exchange(sends, {});
  if (!notices.empty() && stall_notices_) stall_notices_(notices);
  return responses;
}

void SetNegotiator::inspectStalls(ProcessSet& set, std::vector<Response>* responses) {
  Coordinator& coord = *set.coordinator;
  const auto now = Clock::now();
  const double warn_s = params_.stall_warning_s;
  set.next_stall_check =
      now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
                std::clamp(stallAttentionSeconds(params_) / 4, 0.01, 1.0)));
  if (params_.stall_shutdown_s > 0) {
    std::vector<Response> failed = coord.failStalled(
        now, params_.stall_shutdown_s, StatusCode::kTimeout,
        PERSEUS_STR("PERSEUS_STALL_SHUTDOWN="
                    << params_.stall_shutdown_s
                    << " s passed, so the job stops; check that every rank submits this tensor"));
    responses->insert(responses->end(), failed.begin(), failed.end());
  }
  if (params_.stall_diagnosis_s > 0) notices_ = diagnoseStalls(set, now);
  if (now - set.last_stall_warning < std::chrono::duration<double>(warn_s)) return;
  std::vector<Coordinator::Stall> stalls = coord.stalls(now, warn_s);
  if (stalls.empty()) return;
  set.last_stall_warning = now;
  std::ostringstream os;
  // Horovod's text first (users grep their logs for it), then which tensors and ranks.
  os << "One or more tensors were submitted to be reduced, gathered or broadcasted by subset of "
        "ranks and are waiting for remainder of ranks for more than "
     << warn_s
     << " seconds. This may indicate that different ranks are trying to submit different "
        "tensors or that only subset of ranks is submitting tensors, which will cause deadlock. "
        "Process set "
     << set.id << ":";
  for (size_t i = 0; i < stalls.size() && i < 8; ++i) {
    os << " " << opTypeName(stalls[i].op) << " '" << stalls[i].name << "' missing set ranks [";
    for (size_t k = 0; k < stalls[i].missing_ranks.size(); ++k) {
      os << (k ? ", " : "") << stalls[i].missing_ranks[k];
    }
    os << "];";
  }
  if (stalls.size() > 8) os << " and " << stalls.size() - 8 << " more";
  PERSEUS_LOG(WARNING, kEngine) << os.str();
  if (stall_warning_) stall_warning_(os.str());
}

std::vector<StallNotice> SetNegotiator::diagnoseStalls(ProcessSet& set, Clock::time_point now) {
  const double diag_s = params_.stall_diagnosis_s;
  if (now - set.last_diagnosis < std::chrono::duration<double>(diag_s)) return {};
  // One line per interval (StallReport) for up to 4 stalls, oldest first; the line leads with
  // the one that waits on the fewest ranks: when a rank skipped a collective and went on to the
  // next, the skipped one waits on that rank, the next one on all the others.
  std::vector<Coordinator::Stall> stalls = set.coordinator->takeUndiagnosed(now, diag_s, 4);
  if (stalls.empty()) return {};
  std::stable_sort(stalls.begin(), stalls.end(), [](const auto& a, const auto& b) {
    return a.missing_ranks.size() < b.missing_ranks.size();
  });
  set.last_diagnosis = now;
  std::vector<StallNotice> notices;
  for (const Coordinator::Stall& s : stalls) {
    StallNotice n;
    n.op = s.op;
    n.name = s.name;
    for (const TensorMeta& t : s.tensors) {
      n.tensors +=
          (n.tensors.empty() ? "" : ", ") + shapeString(t.shape) + " " + dataTypeName(t.dtype);
    }
    for (int r : s.missing_ranks) {
      const int global = set.members[static_cast<size_t>(r)];
      n.missing.push_back(global);
      n.hosts.push_back(static_cast<size_t>(global) < hostnames_.size() ? hostnames_[global] : "?");
    }
    n.waited_s = s.waited_s;
    n.process_set = set.id;
    notices.push_back(std::move(n));
  }
  return notices;
}

NegotiationStats SetNegotiator::stats() const {
  constexpr auto r = std::memory_order_relaxed;
  NegotiationStats s;
  s.control_exchanges = control_exchanges_.load(r);
  s.control_bytes = control_bytes_.load(r);
  s.coordinator_rounds = coordinator_rounds_.load(r);
  s.cached_responses = cached_responses_.load(r);
  s.coordinated_responses = coordinated_responses_.load(r);
  s.negotiation_ns = negotiation_ns_.load(r);
  return s;
}

}  // namespace perseus::engine
