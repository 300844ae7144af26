#include "engine/set_directory.h"

#include "common/logging.h"
#include "common/status.h"

namespace perseus::engine {

void SetDirectory::added(const ProcessSetInfo& info) {
  std::lock_guard<std::mutex> lock(mu_);
  sets_[info.id] = info;
}

void SetDirectory::removed(int32_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  sets_.erase(id);
}

std::optional<ProcessSetInfo> SetDirectory::find(int32_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sets_.find(id);
  if (it == sets_.end()) return std::nullopt;
  return it->second;
}

void SetDirectory::validate(const Entry& e) const {
  const Request& q = e.request;
  // Built only for an error message: this runs for every submission.
  auto what = [&q] { return PERSEUS_STR(opTypeName(q.op) << " '" << q.name << "'"); };
  if (q.name.empty())
    throw InvalidArgumentError(std::string(opTypeName(q.op)) +
                               ": empty name; give every collective a name");
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sets_.find(q.process_set);
  if (it == sets_.end()) {
    throw InvalidArgumentError(PERSEUS_STR(what()
                                           << ": process set " << q.process_set
                                           << " does not exist; create it with add_process_set"));
  }
  const ProcessSetInfo* info = &it->second;  // no copy: mu_ is held
  if (info->rank < 0) {
    throw InvalidArgumentError(
        PERSEUS_STR(what() << ": rank " << rank_ << " is not a member of process set "
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

int SetDirectory::nextBarrier(int32_t set) {
  std::lock_guard<std::mutex> lock(mu_);
  return barrier_calls_[set]++;
}

int SetDirectory::nextAddSet() {
  std::lock_guard<std::mutex> lock(mu_);
  return add_set_calls_++;
}

int SetDirectory::nextRemoveSet() {
  std::lock_guard<std::mutex> lock(mu_);
  return remove_set_calls_++;
}

void SetDirectory::setStallWarning(const std::string& text) {
  std::lock_guard<std::mutex> lock(mu_);
  last_stall_warning_ = text;
}

std::string SetDirectory::lastStallWarning() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_stall_warning_;
}

}  // namespace perseus::engine
