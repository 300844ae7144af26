#include "negotiation/coordinator.h"

#include <algorithm>
#include <sstream>

namespace perseus::engine {
namespace {

std::string rankList(const std::vector<int>& ranks) {
  std::ostringstream os;
  os << (ranks.size() == 1 ? "set rank " : "set ranks ");
  if (ranks.size() > 1) os << "[";
  for (size_t i = 0; i < ranks.size() && i < 16; ++i) os << (i ? ", " : "") << ranks[i];
  if (ranks.size() > 16) os << ", ...";
  if (ranks.size() > 1) os << "]";
  return os.str();
}

Response errorResponse(const Request& ref, const std::string& name, StatusCode code,
                       const std::string& message) {
  Response r;
  r.op = ref.op;
  r.name = name;
  r.is_error = true;
  r.error_code = code;
  r.error_message = message;
  return r;
}

// One metadata check, a row of kMetadataChecks: `same` compares two requests cheaply; `show`
// formats a request's value for the error message. Formatting runs only once some rank
// differs, so a name whose ranks agree (every successful negotiation) builds no strings.
// `applies` (null: every operation) says which operations carry the field. The rows run after
// the operations agree, so `same` and `show` may read the operation from either request.
struct Check {
  const char* what;
  bool (*applies)(OpType op);
  bool (*same)(const Request& x, const Request& y);
  std::string (*show)(const Request& q);
};

// Returns "" when every rank agrees with the reference rank on `check`, else a message
// "what for OP 'name': set rank 0 has X, set ranks [1, 2] have Y".
std::string findMismatch(const Check& check, const std::string& name, OpType op,
                         const std::vector<const Request*>& by_rank, int ref) {
  const Request& reference = *by_rank[ref];
  bool all_same = true;
  for (const Request* q : by_rank) {
    if (q != nullptr && !check.same(*q, reference)) {
      all_same = false;
      break;
    }
  }
  if (all_same) return "";
  std::string expected = check.show(reference);
  std::map<std::string, std::vector<int>> differing;
  for (size_t r = 0; r < by_rank.size(); ++r) {
    if (by_rank[r] == nullptr) continue;
    std::string v = check.show(*by_rank[r]);
    if (v != expected) differing[v].push_back(static_cast<int>(r));
  }
  if (differing.empty()) return "";
  std::ostringstream os;
  os << "Mismatched " << check.what << " for " << opTypeName(op) << " '" << name << "': set rank "
     << ref << " has " << expected;
  for (const auto& d : differing) os << ", " << rankList(d.second) << " " << d.first;
  os << ". Every rank must submit the same " << check.what << " under one name.";
  return os.str();
}

// Whether two tensor lists agree on dtypes and shapes; with `skip_first`, the first dimension
// may differ (allgather and alltoall rows).
bool sameTensors(const std::vector<TensorMeta>& a, const std::vector<TensorMeta>& b,
                 bool skip_first) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].dtype != b[i].dtype) return false;
    if (!skip_first) {
      if (a[i].shape != b[i].shape) return false;
    } else if (a[i].shape.size() != b[i].shape.size() ||
               !std::equal(a[i].shape.begin() + (a[i].shape.empty() ? 0 : 1), a[i].shape.end(),
                           b[i].shape.begin() + (b[i].shape.empty() ? 0 : 1))) {
      return false;
    }
  }
  return true;
}

std::string showShape(const std::vector<int64_t>& shape, bool skip_first) {
  if (!skip_first) return shapeString(shape);
  std::ostringstream os;
  os << "rank-" << shape.size() << " tensors of shape [*";
  for (size_t i = 1; i < shape.size(); ++i) os << ", " << shape[i];
  os << "]";
  return os.str();
}

// Allgather and alltoall ranks may differ in their tensors' first dimension (their rows).
bool rowsVary(OpType op) { return op == OpType::kAllgather || op == OpType::kAlltoall; }

const Check kSameOperation = {"operations", nullptr,
                              [](const Request& x, const Request& y) { return x.op == y.op; },
                              [](const Request& q) { return std::string(opTypeName(q.op)); }};

// Every field that the ranks must agree on once the operation does, checked in this order: the
// first one that some rank differs on is the error.
const Check kMetadataChecks[] = {
    {"devices", nullptr,
     [](const Request& x, const Request& y) { return x.device_kind == y.device_kind; },
     [](const Request& q) { return std::string(deviceKindName(q.device_kind)); }},
    {"tensor counts", nullptr,
     [](const Request& x, const Request& y) { return x.tensors.size() == y.tensors.size(); },
     [](const Request& q) { return std::to_string(q.tensors.size()); }},
    {"data types", nullptr,
     [](const Request& x, const Request& y) {
       if (x.tensors.size() != y.tensors.size()) return false;
       for (size_t i = 0; i < x.tensors.size(); ++i) {
         if (x.tensors[i].dtype != y.tensors[i].dtype) return false;
       }
       return true;
     },
     [](const Request& q) {
       std::string s;
       for (const auto& t : q.tensors)
         s += std::string(s.empty() ? "" : ",") + dataTypeName(t.dtype);
       return s;
     }},
    {"tensor shapes", nullptr,
     [](const Request& x, const Request& y) {
       return sameTensors(x.tensors, y.tensors, rowsVary(x.op));
     },
     [](const Request& q) {
       std::string s;
       for (const auto& t : q.tensors)
         s += (s.empty() ? "" : ", ") + showShape(t.shape, rowsVary(q.op));
       return s;
     }},
    {"reduction operations",
     [](OpType op) { return op == OpType::kAllreduce || op == OpType::kReducescatter; },
     [](const Request& x, const Request& y) { return x.reduce_op == y.reduce_op; },
     [](const Request& q) { return std::string(reduceOpName(q.reduce_op)); }},
    {"prescale/postscale factors",
     [](OpType op) { return op == OpType::kAllreduce || op == OpType::kReducescatter; },
     [](const Request& x, const Request& y) {
       return x.prescale == y.prescale && x.postscale == y.postscale;
     },
     [](const Request& q) { return PERSEUS_STR(q.prescale << "/" << q.postscale); }},
    {"root ranks", [](OpType op) { return op == OpType::kBroadcast; },
     [](const Request& x, const Request& y) { return x.root == y.root; },
     [](const Request& q) { return std::to_string(q.root); }},
    {"splits counts", [](OpType op) { return op == OpType::kAlltoall; },
     [](const Request& x, const Request& y) { return x.num_splits == y.num_splits; },
     [](const Request& q) { return std::to_string(q.num_splits); }},
    {"process set ranks", [](OpType op) { return op == OpType::kAddProcessSet; },
     [](const Request& x, const Request& y) { return x.set_ranks == y.set_ranks; },
     [](const Request& q) {
       std::vector<int64_t> v(q.set_ranks.begin(), q.set_ranks.end());
       return shapeString(v);
     }},
    {"process set ids", [](OpType op) { return op == OpType::kRemoveProcessSet; },
     [](const Request& x, const Request& y) { return x.set_id == y.set_id; },
     [](const Request& q) { return std::to_string(q.set_id); }},
};

// The lowest set rank that has not joined (a null request); `joined` gets the others.
int referenceRank(const std::vector<const Request*>& by_rank, std::vector<int>* joined) {
  int ref = -1;
  for (size_t r = 0; r < by_rank.size(); ++r) {
    if (by_rank[r] == nullptr) {
      joined->push_back(static_cast<int>(r));
    } else if (ref < 0) {
      ref = static_cast<int>(r);
    }
  }
  return ref;
}

// Note [Join]: joined ranks contribute zeros to allreduce, no rows to allgather, and receive
// broadcasts from a root that has not joined. Returns "" when `first`'s collective can run with
// `joined`, else the refusal; Horovod refuses allgather and broadcast here, and its text leads
// the message of the collectives that are still refused.
std::string refusalForJoined(const Request& first, const std::string& name,
                             const std::vector<int>& joined) {
  const OpType op = first.op;
  if (joined.empty() || op == OpType::kAllreduce || op == OpType::kBarrier ||
      op == OpType::kAllgather || op == OpType::kBroadcast) {
    return "";
  }
  const char* horovod =
      op == OpType::kAlltoall        ? "Alltoall is not supported with Join at this time."
      : op == OpType::kReducescatter ? "Reducescatter is not supported with Join at this time."
                                     : "This collective is not supported with Join.";
  return PERSEUS_STR(horovod << " " << opTypeName(op) << " '" << name << "' cannot run while "
                             << rankList(joined)
                             << " have joined: allreduce, allgather, broadcast "
                                "and barrier take joined ranks into account. "
                                "Finish such collectives before join().");
}

// Whether a broadcast's root has joined, and so has nothing to send.
bool rootHasJoined(const Request& first, const std::vector<const Request*>& by_rank) {
  return first.op == OpType::kBroadcast && first.root >= 0 &&
         static_cast<size_t>(first.root) < by_rank.size() && by_rank[first.root] == nullptr;
}

// The response that every rank agreed on: `first`'s metadata, and allgather's rows per rank.
Response agreedResponse(const std::string& name, const Request& first,
                        const std::vector<const Request*>& by_rank) {
  Response r;
  r.op = first.op;
  r.name = name;
  r.tensors = first.tensors;
  r.reduce_op = first.reduce_op;
  r.prescale = first.prescale;
  r.postscale = first.postscale;
  r.root = first.root;
  r.set_ranks = first.set_ranks;
  r.set_id = first.set_id;
  r.device_kind = first.device_kind;
  if (first.op == OpType::kAllgather) {
    const size_t n = by_rank.size();
    r.first_dims.assign(first.tensors.size() * n, 0);
    for (size_t t = 0; t < first.tensors.size(); ++t) {
      for (size_t rank = 0; rank < n; ++rank) {
        if (by_rank[rank] == nullptr) continue;  // joined: no rows
        const auto& shape = by_rank[rank]->tensors[t].shape;
        r.first_dims[t * n + rank] = shape.empty() ? 1 : shape[0];
      }
    }
  }
  return r;
}

}  // namespace

Response constructResponse(const std::string& name, const std::vector<const Request*>& by_rank) {
  std::vector<int> joined;
  const int ref = referenceRank(by_rank, &joined);
  PERSEUS_CHECK(ref >= 0, "no request for '" << name << "'");
  const Request& first = *by_rank[ref];
  const OpType op = first.op;

  std::string msg = findMismatch(kSameOperation, name, op, by_rank, ref);
  if (!msg.empty()) return errorResponse(first, name, StatusCode::kMismatch, msg);
  msg = refusalForJoined(first, name, joined);
  if (!msg.empty()) return errorResponse(first, name, StatusCode::kUnsupported, msg);
  if (rootHasJoined(first, by_rank)) {
    return errorResponse(first, name, StatusCode::kInvalidArgument,
                         PERSEUS_STR("BROADCAST '" << name << "': its root, set rank " << first.root
                                                   << ", has joined and has nothing to send; "
                                                      "broadcast before join() on the root"));
  }
  for (const Check& check : kMetadataChecks) {
    if (check.applies != nullptr && !check.applies(op)) continue;
    msg = findMismatch(check, name, op, by_rank, ref);
    if (!msg.empty()) return errorResponse(first, name, StatusCode::kMismatch, msg);
  }
  return agreedResponse(name, first, by_rank);
}

Coordinator::Coordinator(int set_size) : size_(set_size), joined_(set_size, false) {}

void Coordinator::add(int rank, const std::vector<Request>& requests, Clock::time_point now) {
  PERSEUS_CHECK(rank >= 0 && rank < size_, "rank " << rank << " outside a set of " << size_);
  for (const Request& q : requests) {
    if (q.op == OpType::kJoin) {
      if (!joined_[rank]) {
        joined_[rank] = true;
        ++num_joined_;
      }
      last_joined_ = rank;  // ranks arrive in ascending order: ties go to the highest rank
      continue;
    }
    Waiting& w = table_[q.name];
    const Clock::time_point submitted =
        now - std::chrono::duration_cast<Clock::duration>(
                  std::chrono::duration<double>(std::max(0.0, q.waited_s)));
    if (w.by_rank.empty()) {
      w.seq = next_seq_++;
      w.first_seen = submitted;
      w.by_rank.resize(size_);
      w.present.assign(size_, false);
    }
    w.first_seen = std::min(w.first_seen, submitted);
    PERSEUS_CHECK(!w.present[rank], "set rank " << rank << " sent '" << q.name << "' twice");
    w.by_rank[rank] = q;
    w.present[rank] = true;
    ++w.count;
  }
}

std::vector<Response> Coordinator::takeReady() {
  std::vector<std::pair<uint64_t, std::string>> ready;
  for (const auto& [name, w] : table_) {
    bool complete = true;
    for (int r = 0; r < size_ && complete; ++r) complete = w.present[r] || joined_[r];
    if (complete) ready.emplace_back(w.seq, name);
  }
  std::sort(ready.begin(), ready.end());
  std::vector<Response> out;
  out.reserve(ready.size() + 1);
  for (const auto& [seq, name] : ready) {
    const Waiting& w = table_[name];
    std::vector<const Request*> by_rank(size_, nullptr);
    for (int r = 0; r < size_; ++r) {
      if (w.present[r]) by_rank[r] = &w.by_rank[r];
    }
    out.push_back(constructResponse(name, by_rank));
    table_.erase(name);
  }
  if (num_joined_ == size_) {
    Response j;
    j.op = OpType::kJoin;
    j.name = "__join";
    j.last_joined_rank = last_joined_;
    out.push_back(std::move(j));
    joined_.assign(size_, false);
    num_joined_ = 0;
    last_joined_ = -1;
  }
  return out;
}

std::vector<Coordinator::Stall> Coordinator::stalls(Clock::time_point now,
                                                    double older_than_s) const {
  std::vector<std::pair<uint64_t, Stall>> found;
  for (const auto& [name, w] : table_) {
    double waited = std::chrono::duration<double>(now - w.first_seen).count();
    if (waited <= older_than_s) continue;
    Stall s{name, OpType::kAllreduce, {}, waited, {}};
    for (int r = 0; r < size_; ++r) {
      if (w.present[r]) {
        s.op = w.by_rank[r].op;
        if (s.tensors.empty()) s.tensors = w.by_rank[r].tensors;
      } else if (!joined_[r]) {
        s.missing_ranks.push_back(r);
      }
    }
    found.emplace_back(w.seq, std::move(s));
  }
  std::sort(found.begin(), found.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Stall> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

std::vector<Coordinator::Stall> Coordinator::takeUndiagnosed(Clock::time_point now,
                                                             double older_than_s, size_t max) {
  std::vector<Stall> out;
  for (Stall& s : stalls(now, older_than_s)) {
    if (out.size() == max) break;
    Waiting& w = table_.at(s.name);
    if (w.diagnosed) continue;
    w.diagnosed = true;
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<Response> Coordinator::failStalled(Clock::time_point now, double older_than_s,
                                               StatusCode code, const std::string& why) {
  std::vector<Response> out;
  for (const Stall& s : stalls(now, older_than_s)) {
    Request ref;
    ref.op = s.op;
    out.push_back(errorResponse(
        ref, s.name, code,
        PERSEUS_STR(opTypeName(s.op) << " '" << s.name << "' waited " << s.waited_s << " s for "
                                     << rankList(s.missing_ranks) << ": " << why)));
    table_.erase(s.name);
  }
  return out;
}

}  // namespace perseus::engine
