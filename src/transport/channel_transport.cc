#include "transport/channel_transport.h"

#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>

#include "common/logging.h"
#include "common/status.h"

namespace perseus::transport {
namespace {

using Clock = std::chrono::steady_clock;

// While blocked, how long one sleep lasts before liveness and the timeout are re-checked.
constexpr std::chrono::microseconds kBlockSlice{1000};
// How often a blocked exchange asks its channels whether their peers are still alive.
constexpr std::chrono::microseconds kCheckPeerInterval{2000};
// Sleep slice for fd-less channels when nobody rings a doorbell for them.
constexpr std::chrono::microseconds kUnsignalledSlice{100};
// waitIncoming with a reliable doorbell still wakes this often (cheap insurance).
constexpr std::chrono::microseconds kIdleSlice{100000};

int toPollMs(std::chrono::microseconds us) {
  return static_cast<int>(std::max<int64_t>(1, (us.count() + 999) / 1000));
}

}  // namespace

uint32_t LocalDoorbell::rings() { return seq_.load(std::memory_order_seq_cst); }

uint32_t LocalDoorbell::arm() {
  std::lock_guard<std::mutex> lock(mutex_);
  return seq_.load(std::memory_order_relaxed);
}

void LocalDoorbell::wait(uint32_t ticket, std::chrono::microseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait_for(lock, timeout, [&] { return seq_.load(std::memory_order_relaxed) != ticket; });
}

void LocalDoorbell::ring() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    seq_.fetch_add(1, std::memory_order_seq_cst);
  }
  cv_.notify_all();
}

ChannelTransport::ChannelTransport(int rank, std::vector<std::unique_ptr<Channel>> channels,
                                   const Params& params, std::shared_ptr<Doorbell> doorbell)
    : rank_(rank),
      channels_(std::move(channels)),
      spin_(std::max<int64_t>(0, params.spin_us)),
      timeout_(params.timeout_s),
      doorbell_is_external_(doorbell != nullptr),
      doorbell_(doorbell ? std::move(doorbell) : std::make_shared<LocalDoorbell>()),
      yield_when_idle_(doorbell_->oversubscribed()),
      seen_rings_(doorbell_->rings()) {
  if (rank_ < 0 || rank_ >= size()) {
    throw InvalidArgumentError(PERSEUS_STR("ChannelTransport: rank "
                                           << rank_ << " is outside 0.." << size() - 1
                                           << " (one channel slot per rank)"));
  }
  for (int r = 0; r < size(); ++r) {
    if (!channels_[r]) continue;
    if (channels_[r]->pollFd() >= 0) {
      any_fd_channel_ = true;
    } else {
      any_fdless_channel_ = true;
    }
  }
  if (any_fd_channel_) {
    event_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (event_fd_ < 0) {
      throw InternalError(PERSEUS_STR("eventfd() failed: " << std::strerror(errno)));
    }
  }
  peer_busy_pass_.assign(2 * channels_.size(), 0);
}

ChannelTransport::~ChannelTransport() {
  if (event_fd_ >= 0) ::close(event_fd_);
}

void ChannelTransport::validate(int peer, size_t bytes, const void* data, const char* what) const {
  if (peer < 0 || peer >= size()) {
    throw InvalidArgumentError(PERSEUS_STR("rank " << rank_ << ": " << what << " names rank "
                                                   << peer << ", but the job has ranks 0.."
                                                   << size() - 1));
  }
  if (peer != rank_ && !channels_[peer]) {
    throw InvalidArgumentError(PERSEUS_STR("rank " << rank_ << ": " << what << " with rank " << peer
                                                   << ", which this transport has no channel to"));
  }
  if (bytes > 0 && data == nullptr) {
    throw InvalidArgumentError(PERSEUS_STR("rank " << rank_ << ": " << what << " of " << bytes
                                                   << " bytes with rank " << peer
                                                   << " has a null buffer"));
  }
}

void ChannelTransport::checkAborted() const {
  if (!aborted_.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(abort_mutex_);
  throw ShutDownError(PERSEUS_STR("rank " << rank_ << ": transport aborted: " << abort_reason_));
}

void ChannelTransport::exchange(const std::vector<SendOp>& sends,
                                const std::vector<RecvOp>& recvs) {
  checkAborted();
  ops_.clear();
  bool any_self = false;
  for (const SendOp& s : sends) {
    validate(s.peer, s.bytes, s.data, "send");
    if (s.peer == rank_) {
      any_self = true;
    } else if (s.bytes > 0) {
      ops_.push_back({channels_[s.peer].get(), static_cast<char*>(const_cast<void*>(s.data)),
                      s.bytes, s.bytes, s.peer, true});
    }
  }
  for (const RecvOp& r : recvs) {
    validate(r.peer, r.bytes, r.data, "receive");
    if (r.peer == rank_) {
      any_self = true;
    } else if (r.bytes > 0) {
      ops_.push_back(
          {channels_[r.peer].get(), static_cast<char*>(r.data), r.bytes, r.bytes, r.peer, false});
    }
  }
  if (any_self) copySelf(sends, recvs);
  ops_left_ = ops_.size();

  // Spin (no syscalls) for spin_ after the last progress, then block in slices; the clock is
  // read only every 64 idle passes so that the busy-poll stays a tight loop. Oversubscribed,
  // every idle pass yields: the peer we wait for may be queued behind us on this core, and
  // a spinner that keeps the core delays it by a whole time slice (engine_latency_bench,
  // 4 B on 2 cores: 3 ranks 240-310 -> 17-21 us, 4 ranks 350-380 -> 26-32 us).
  uint32_t idle_passes = 0;
  bool idle_timing = false;
  Clock::time_point idle_since, last_check;
  while (ops_left_ > 0) {
    if (progressPass()) {
      idle_passes = 0;
      idle_timing = false;
      continue;
    }
    if (yield_when_idle_) {
      sched_yield();
    } else if ((++idle_passes & 63u) != 0) {
      continue;
    }
    checkAborted();
    const Clock::time_point now = Clock::now();
    if (!idle_timing) {
      idle_timing = true;
      idle_since = last_check = now;
      continue;
    }
    if (now - idle_since < spin_) continue;
    if (now - last_check >= kCheckPeerInterval) {
      last_check = now;
      checkPeers();
      const std::chrono::duration<double> idle = now - idle_since;
      if (idle >= timeout_) throwTimeout(idle.count());
    }
    if (blockOnce(true, kBlockSlice)) {
      idle_passes = 0;
      idle_timing = false;
    }
  }
}

bool ChannelTransport::progressPass() {
  ++pass_;
  bool moved = false;
  for (PendingOp& op : ops_) {
    if (op.left == 0) continue;
    // Ops with one peer in one direction form a FIFO: only the first unfinished one may move.
    uint64_t& busy = peer_busy_pass_[2 * op.peer + (op.is_send ? 1 : 0)];
    if (busy == pass_) continue;
    const size_t n =
        op.is_send ? op.channel->trySend(op.data, op.left) : op.channel->tryRecv(op.data, op.left);
    if (n > 0) {
      op.data += n;
      op.left -= n;
      moved = true;
      if (op.left == 0) {
        --ops_left_;
        continue;
      }
    }
    busy = pass_;
  }
  return moved;
}

void ChannelTransport::copySelf(const std::vector<SendOp>& sends,
                                const std::vector<RecvOp>& recvs) {
  // Self-sends append to one FIFO; self-receives take from its front. Bytes go straight from
  // a send to a receive of the same exchange when the FIFO is empty, and are buffered only when
  // sent ahead of their receive.
  size_t ri = 0, roff = 0;
  auto nextRecv = [&]() -> const RecvOp* {
    while (ri < recvs.size() && (recvs[ri].peer != rank_ || roff == recvs[ri].bytes)) {
      ++ri;
      roff = 0;
    }
    return ri < recvs.size() ? &recvs[ri] : nullptr;
  };
  auto feed = [&](const char* src, size_t n) -> size_t {  // returns bytes consumed
    size_t used = 0;
    while (used < n) {
      const RecvOp* r = nextRecv();
      if (r == nullptr) break;
      const size_t k = std::min(n - used, r->bytes - roff);
      std::memmove(static_cast<char*>(r->data) + roff, src + used, k);  // in-place is allowed
      roff += k;
      used += k;
    }
    return used;
  };
  self_read_ += feed(self_buffer_.data() + self_read_, self_buffer_.size() - self_read_);
  if (self_read_ == self_buffer_.size()) {
    self_buffer_.clear();
    self_read_ = 0;
  }
  for (const SendOp& s : sends) {
    if (s.peer != rank_ || s.bytes == 0) continue;
    const char* src = static_cast<const char*>(s.data);
    const size_t used = self_buffer_.size() > self_read_ ? 0 : feed(src, s.bytes);
    self_buffer_.insert(self_buffer_.end(), src + used, src + s.bytes);
  }
  if (nextRecv() != nullptr) {
    size_t missing = 0;
    for (const RecvOp& r : recvs) {
      if (r.peer == rank_) missing += r.bytes;
    }
    throw InvalidArgumentError(PERSEUS_STR(
        "rank " << rank_ << " receives " << missing << " bytes from itself, more than it has sent "
                << "to itself so far; a self-receive must be matched by self-sends in the same or "
                << "an earlier exchange (it would otherwise wait forever)"));
  }
}

void ChannelTransport::checkPeers() {
  for (PendingOp& op : ops_) {
    if (op.left > 0) op.channel->checkPeer();
  }
}

void ChannelTransport::throwTimeout(double idle_s) const {
  std::ostringstream os;
  os << "rank " << rank_ << ": no byte moved for " << idle_s << " s (PERSEUS_TIMEOUT) on ";
  const char* sep = "";
  for (const PendingOp& op : ops_) {
    if (op.left == 0) continue;
    os << sep << (op.is_send ? "send to rank " : "receive from rank ") << op.peer << " (" << op.left
       << " of " << op.bytes << " bytes outstanding)";
    sep = ", ";
  }
  os << ". The peer may be stuck, dead without notice, or running a different collective; "
        "raise PERSEUS_TIMEOUT if it is only slow.";
  throw TimeoutError(os.str());
}

void ChannelTransport::drainEventFd() {
  uint64_t value = 0;
  while (::read(event_fd_, &value, sizeof(value)) > 0) {
  }
}

bool ChannelTransport::blockOnce(bool for_exchange, std::chrono::microseconds limit,
                                 const uint32_t* since_rings) {
  // Which channels are we waiting on, and do any of them have a file descriptor?
  std::vector<pollfd> fds;  // small; blocking is already the slow path
  bool fdless = false;
  if (for_exchange) {
    for (const PendingOp& op : ops_) {
      if (op.left == 0) continue;
      const int fd = op.channel->pollFd();
      if (fd < 0) {
        fdless = true;
      } else {
        // POLLIN for sends too: TcpChannel's pollFd() is an epoll fd, which poll() reports
        // only as readable, also when a blocked socket became writable.
        fds.push_back({fd, static_cast<short>(op.is_send ? (POLLOUT | POLLIN) : POLLIN), 0});
      }
    }
  } else {
    fdless = any_fdless_channel_;
    if (any_fd_channel_) {
      for (const auto& c : channels_) {
        if (c && c->pollFd() >= 0) fds.push_back({c->pollFd(), POLLIN, 0});
      }
    }
  }

  if (!fds.empty()) {
    // Shared-memory progress does not wake poll(), so poll in short slices when both kinds wait.
    const std::chrono::microseconds slice = fdless ? std::min(limit, kBlockSlice) : limit;
    fds.push_back({event_fd_, POLLIN, 0});
    const int rc = ::poll(fds.data(), fds.size(), toPollMs(slice));
    if (rc < 0 && errno != EINTR) {
      throw InternalError(
          PERSEUS_STR("rank " << rank_ << ": poll() failed: " << std::strerror(errno)));
    }
    if (rc > 0 && (fds.back().revents & POLLIN)) drainEventFd();
    return false;
  }

  const uint32_t ticket = doorbell_->arm();
  // Re-check after arming: progress that happened before arm() rang no bell for us.
  const bool ready = for_exchange ? progressPass()
                                  : (wake_pending_.load() || hasIncoming() ||
                                     (since_rings != nullptr && ticket != *since_rings));
  if (ready || aborted_.load()) {
    doorbell_->disarm();
    return for_exchange && ready;
  }
  doorbell_->wait(ticket, doorbell_is_external_ ? limit : std::min(limit, kUnsignalledSlice));
  return false;
}

bool ChannelTransport::hasIncoming() {
  if (self_buffer_.size() > self_read_) return true;
  for (const auto& c : channels_) {
    if (c && c->hasIncoming()) return true;
  }
  return false;
}

void ChannelTransport::waitIncoming(std::chrono::microseconds timeout,
                                    std::chrono::microseconds spin) {
  if (spin == kSpinSetting) spin = spin_;
  const uint32_t since = seen_rings_;
  // Whatever made this wait return, the rings so far have been seen once it returns: the
  // caller checks what they announce before it waits again (Transport::waitIncoming()).
  struct Seen {
    ChannelTransport& t;
    ~Seen() { t.seen_rings_ = t.doorbell_->rings(); }
  } seen{*this};
  checkAborted();
  // A ring that brought no bytes (a peer's ring()) ends the wait too, also in the spin.
  auto ready = [&] {
    return wake_pending_.exchange(false) || hasIncoming() || doorbell_->rings() != since;
  };
  if (ready()) return;
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline = start + timeout;
  const Clock::time_point spin_end = start + std::min(timeout, spin);
  for (uint32_t i = 1; spin.count() > 0; ++i) {
    if (ready()) return;
    if (yield_when_idle_) sched_yield();
    if (yield_when_idle_ || (i & 63u) == 0) {
      checkAborted();
      if (Clock::now() >= spin_end) break;
    }
  }
  for (;;) {
    const Clock::time_point now = Clock::now();
    if (now >= deadline) return;
    const auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - now);
    blockOnce(false, std::min(left + std::chrono::microseconds(1), kIdleSlice), &since);
    checkAborted();
    if (ready()) return;
  }
}

void ChannelTransport::ring(int peer) {
  if (peer >= 0 && peer < size() && channels_[static_cast<size_t>(peer)])
    channels_[static_cast<size_t>(peer)]->ring();
}

void ChannelTransport::wake() {
  wake_pending_.store(true);
  doorbell_->ring();
  if (event_fd_ >= 0) {
    const uint64_t one = 1;
    // A full counter (EAGAIN) already means "readable": nothing lost.
    [[maybe_unused]] ssize_t rc = ::write(event_fd_, &one, sizeof(one));
  }
}

void ChannelTransport::abort(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(abort_mutex_);
    if (aborted_.load()) return;
    abort_reason_ = reason;
    aborted_.store(true, std::memory_order_seq_cst);  // before ringing: Doorbell contract
  }
  PERSEUS_LOG(INFO, kTransport) << "rank " << rank_ << ": transport aborted: " << reason;
  wake();
}

}  // namespace perseus::transport
