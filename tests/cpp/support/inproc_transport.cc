#include "support/inproc_transport.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "common/status.h"

namespace perseus::testing {

InProcFabric::InProcFabric(int size, size_t capacity)
    : size_(size), capacity_(capacity), queues_(static_cast<size_t>(size) * size), lost_(size) {}

void InProcFabric::loseRank(int rank) {
  std::lock_guard<std::mutex> lock(mutex_);
  lost_[rank] = true;
  changed_.notify_all();
}

void InProcFabric::abortAll(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (abort_reason_.empty()) abort_reason_ = reason;
  changed_.notify_all();
}

InProcTransport::InProcTransport(std::shared_ptr<InProcFabric> fabric, int rank,
                                 const Params& params)
    : fabric_(std::move(fabric)), rank_(rank), timeout_s_(params.timeout_s) {}

void InProcTransport::throwIfFailed(std::unique_lock<std::mutex>&, int peer) {
  const std::string& reason = !abort_reason_.empty() ? abort_reason_ : fabric_->abort_reason_;
  if (!reason.empty()) throw ShutDownError("in-process transport aborted: " + reason);
  if (peer >= 0 && fabric_->lost_[peer]) {
    throw PeerLostError(peer, PERSEUS_STR("rank " << peer << " was lost (in-process test fabric)"));
  }
  if (fabric_->lost_[rank_]) throw PeerLostError(rank_, "this rank was marked lost");
}

void InProcTransport::exchange(const std::vector<transport::SendOp>& sends,
                               const std::vector<transport::RecvOp>& recvs) {
  struct Pending {
    int peer;
    unsigned char* data;
    size_t left;
  };
  std::vector<Pending> out, in;
  for (const auto& s : sends) {
    if (s.peer < 0 || s.peer >= size()) throw InvalidArgumentError("exchange: bad send peer");
    if (s.bytes > 0)
      out.push_back(
          {s.peer, const_cast<unsigned char*>(static_cast<const unsigned char*>(s.data)), s.bytes});
  }
  for (const auto& r : recvs) {
    if (r.peer < 0 || r.peer >= size()) throw InvalidArgumentError("exchange: bad recv peer");
    if (r.bytes > 0) in.push_back({r.peer, static_cast<unsigned char*>(r.data), r.bytes});
  }
  std::unique_lock<std::mutex> lock(fabric_->mutex_);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s_);
  while (true) {
    bool progress = false, done = true;
    for (auto& s : out) {
      if (s.left == 0) continue;
      throwIfFailed(lock, s.peer);
      auto& q = fabric_->queue(rank_, s.peer).bytes;
      size_t room = fabric_->capacity_ > q.size() ? fabric_->capacity_ - q.size() : 0;
      size_t n = std::min(room, s.left);
      if (n > 0) {
        q.insert(q.end(), s.data, s.data + n);
        s.data += n;
        s.left -= n;
        progress = true;
      }
      done = done && s.left == 0;
    }
    for (auto& r : in) {
      if (r.left == 0) continue;
      auto& q = fabric_->queue(r.peer, rank_).bytes;
      size_t n = std::min(q.size(), r.left);
      if (n > 0) {
        std::copy(q.begin(), q.begin() + static_cast<std::ptrdiff_t>(n), r.data);
        q.erase(q.begin(), q.begin() + static_cast<std::ptrdiff_t>(n));
        r.data += n;
        r.left -= n;
        progress = true;
      }
      if (r.left > 0) throwIfFailed(lock, r.peer);
      done = done && r.left == 0;
    }
    if (progress) fabric_->changed_.notify_all();
    if (done) return;
    if (progress) {
      deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s_);
      continue;
    }
    throwIfFailed(lock, -1);
    if (fabric_->changed_.wait_until(lock, deadline) == std::cv_status::timeout) {
      throw TimeoutError(PERSEUS_STR("rank " << rank_ << ": no progress for " << timeout_s_
                                             << " s in an in-process exchange"));
    }
  }
}

bool InProcTransport::hasIncoming() {
  std::lock_guard<std::mutex> lock(fabric_->mutex_);
  for (int p = 0; p < size(); ++p) {
    if (!fabric_->queue(p, rank_).bytes.empty()) return true;
  }
  return false;
}

void InProcTransport::waitIncoming(std::chrono::microseconds timeout,
                                   std::chrono::microseconds /*spin*/) {
  std::unique_lock<std::mutex> lock(fabric_->mutex_);
  fabric_->changed_.wait_for(lock, timeout, [&] {
    if (woken_) return true;
    for (int p = 0; p < size(); ++p) {
      if (!fabric_->queue(p, rank_).bytes.empty()) return true;
    }
    return false;
  });
  woken_ = false;
}

void InProcTransport::wake() {
  std::lock_guard<std::mutex> lock(fabric_->mutex_);
  woken_ = true;
  fabric_->changed_.notify_all();
}

void InProcTransport::abort(const std::string& reason) {
  std::lock_guard<std::mutex> lock(fabric_->mutex_);
  if (abort_reason_.empty()) abort_reason_ = reason.empty() ? "aborted" : reason;
  fabric_->changed_.notify_all();
}

std::vector<std::unique_ptr<InProcTransport>> makeInProcTransports(int size, const Params& params,
                                                                   size_t capacity) {
  auto fabric = std::make_shared<InProcFabric>(size, capacity);
  std::vector<std::unique_ptr<InProcTransport>> out;
  for (int r = 0; r < size; ++r)
    out.push_back(std::make_unique<InProcTransport>(fabric, r, params));
  return out;
}

}  // namespace perseus::testing
