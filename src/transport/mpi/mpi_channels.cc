#include "transport/mpi/mpi_channels.h"

#include "common/logging.h"
#include "common/status.h"

#ifdef PERSEUS_HAVE_MPI
// The C API only: the C++ bindings would need libmpi_cxx.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#endif

namespace perseus::transport::mpi {

#ifndef PERSEUS_HAVE_MPI

bool built() { return false; }

std::vector<std::unique_ptr<Channel>> connectMpiPeers(int, int, const Params&) {
  throw InvalidArgumentError(
      "PERSEUS_CPU_OPERATIONS=mpi, but this Perseus was built without MPI (no MPI found at "
      "build time); rebuild with an MPI (e.g. libopenmpi-dev) or unset PERSEUS_CPU_OPERATIONS");
}

#else

namespace {

using Clock = std::chrono::steady_clock;

// Bytes per MPI message: large enough for MPI's bandwidth, small enough that the bounce
// buffers of many peers stay modest.
constexpr size_t kChunkBytes = 256 * 1024;
constexpr int kSendDepth = 4;
constexpr int kRecvDepth = 2;
constexpr int kTag = 7031;

std::string errorText(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<size_t>(len));
}

// MPI_COMM_WORLD duplicated for Perseus (so its messages never match the application's), and
// MPI itself if Perseus initialised it. Shared by the channels; the last one finalises.
class MpiContext {
 public:
  MpiContext() {
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (finalized) {
      throw UnsupportedError(
          "PERSEUS_CPU_OPERATIONS=mpi: MPI was already finalised in this process (Perseus "
          "finalises MPI at shutdown when it initialised it, and MPI cannot start twice); "
          "initialise MPI in the application to start Perseus again");
    }
    int provided = 0;
    if (!initialized) {
      int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
      if (rc != MPI_SUCCESS) {
        throw InvalidArgumentError("PERSEUS_CPU_OPERATIONS=mpi: MPI_Init_thread failed: " +
                                   errorText(rc) + "; was the job started by mpirun?");
      }
      owns_mpi_ = true;
    } else {
      MPI_Query_thread(&provided);
    }
    if (provided < MPI_THREAD_SERIALIZED) {
      throw UnsupportedError(PERSEUS_STR(
          "PERSEUS_CPU_OPERATIONS=mpi needs MPI_THREAD_SERIALIZED or better (the engine thread "
          "calls MPI), but MPI provides level "
          << provided
          << "; initialise MPI with "
             "MPI_Init_thread(MPI_THREAD_MULTIPLE) in the application, or use another data plane"));
    }
    MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
    // Errors come back as codes, so a broken peer becomes a PeerLostError naming it.
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  }
  ~MpiContext() {
    MPI_Comm_free(&comm_);
    if (owns_mpi_) MPI_Finalize();
  }
  MPI_Comm comm() const { return comm_; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  bool owns_mpi_ = false;
};

class MpiChannel : public Channel {
 public:
  MpiChannel(std::shared_ptr<MpiContext> context, int peer, double timeout_s)
      : context_(std::move(context)), peer_(peer), timeout_s_(timeout_s) {
    for (int i = 0; i < kRecvDepth; ++i) {
      recvs_.emplace_back();
      recvs_.back().data.resize(kChunkBytes);
      post(recvs_.back());
    }
  }

  ~MpiChannel() override {
    // Unmatched receives cancel locally; sends in flight get until the timeout to finish (the
    // peer is normally shutting down too and receives them).
    for (Buffer& b : recvs_) {
      if (b.req == MPI_REQUEST_NULL) continue;
      MPI_Cancel(&b.req);
      MPI_Wait(&b.req, MPI_STATUS_IGNORE);
    }
    const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s_);
    for (Buffer& b : sends_) {
      int done = 0;
      while (b.req != MPI_REQUEST_NULL && !done && Clock::now() < deadline) {
        MPI_Test(&b.req, &done, MPI_STATUS_IGNORE);
      }
      if (b.req != MPI_REQUEST_NULL) {
        PERSEUS_LOG(WARNING, kTransport)
            << "MPI send to rank " << peer_ << " did not complete before shutdown; abandoned";
        MPI_Request_free(&b.req);
      }
    }
  }

  size_t trySend(const void* data, size_t bytes) override {
    size_t sent = 0;
    while (sent < bytes) {
      Buffer* b = freeSendBuffer();
      if (b == nullptr) break;
      const size_t n = std::min(bytes - sent, kChunkBytes);
      if (b->data.size() < kChunkBytes) b->data.resize(kChunkBytes);
      std::memcpy(b->data.data(), static_cast<const char*>(data) + sent, n);
      check(MPI_Isend(b->data.data(), static_cast<int>(n), MPI_BYTE, peer_, kTag, context_->comm(),
                      &b->req),
            "MPI_Isend");
      sends_.push_back(std::move(*b));
      spare_.pop_back();
      sent += n;
    }
    return sent;
  }

  size_t tryRecv(void* data, size_t bytes) override {
    size_t got = 0;
    while (got < bytes && ready()) {
      Buffer& head = recvs_.front();
      const size_t n = std::min(bytes - got, head.size - head.offset);
      std::memcpy(static_cast<char*>(data) + got, head.data.data() + head.offset, n);
      head.offset += n;
      got += n;
      if (head.offset == head.size) {  // consumed: post it again behind the others
        Buffer b = std::move(head);
        recvs_.pop_front();
        post(b);
        recvs_.push_back(std::move(b));
      }
    }
    return got;
  }

  bool hasIncoming() override { return ready(); }
  int pollFd() const override { return -1; }
  // A dead rank makes mpirun end the job, and MPI reports broken connections as error codes
  // (check()), so there is nothing to probe.
  void checkPeer() override {}

 private:
  struct Buffer {
    std::vector<char> data;
    MPI_Request req = MPI_REQUEST_NULL;
    size_t size = 0;    // receive: bytes that arrived (valid once complete)
    size_t offset = 0;  // receive: bytes already handed out
    bool complete = false;
  };

  void post(Buffer& b) {
    b.size = b.offset = 0;
    b.complete = false;
    check(MPI_Irecv(b.data.data(), static_cast<int>(kChunkBytes), MPI_BYTE, peer_, kTag,
                    context_->comm(), &b.req),
          "MPI_Irecv");
  }

  // True when the oldest receive holds bytes not handed out yet.
  bool ready() {
    Buffer& head = recvs_.front();
    if (!head.complete) {
      int done = 0;
      MPI_Status status;
      check(MPI_Test(&head.req, &done, &status), "MPI_Test");
      if (!done) return false;
      int count = 0;
      MPI_Get_count(&status, MPI_BYTE, &count);
      head.complete = true;
      head.size = static_cast<size_t>(count);
    }
    return head.offset < head.size;
  }

  // A send buffer whose MPI_Isend has completed (or a new one while fewer than kSendDepth are
  // in flight), left at spare_.back(); null when all are still in flight.
  Buffer* freeSendBuffer() {
    while (!sends_.empty()) {
      int done = 0;
      check(MPI_Test(&sends_.front().req, &done, MPI_STATUS_IGNORE), "MPI_Test");
      if (!done) break;
      spare_.push_back(std::move(sends_.front()));
      sends_.pop_front();
    }
    if (spare_.empty() && sends_.size() < static_cast<size_t>(kSendDepth)) spare_.emplace_back();
    return spare_.empty() ? nullptr : &spare_.back();
  }

  void check(int rc, const char* what) const {
    if (rc == MPI_SUCCESS) return;
    throw PeerLostError(peer_,
                        PERSEUS_STR(what << " with rank " << peer_ << " failed: " << errorText(rc)
                                         << "; the rank or its connection is gone"));
  }

  std::shared_ptr<MpiContext> context_;
  const int peer_;
  const double timeout_s_;
  std::deque<Buffer> recvs_;   // posted in this order; front is the next to read
  std::deque<Buffer> sends_;   // in flight, oldest first
  std::vector<Buffer> spare_;  // completed send buffers for reuse
};

}  // namespace

bool built() { return true; }

std::vector<std::unique_ptr<Channel>> connectMpiPeers(int rank, int size, const Params& params) {
  auto context = std::make_shared<MpiContext>();
  int mpi_rank = -1, mpi_size = 0;
  MPI_Comm_rank(context->comm(), &mpi_rank);
  MPI_Comm_size(context->comm(), &mpi_size);
  if (mpi_rank != rank || mpi_size != size) {
    throw MismatchError(PERSEUS_STR(
        "PERSEUS_CPU_OPERATIONS=mpi: MPI says this process is rank "
        << mpi_rank << " of " << mpi_size << " but the launcher's variables say rank " << rank
        << " of " << size
        << "; start every rank with one mpirun and do not set PERSEUS_RANK/PERSEUS_SIZE"));
  }
  std::vector<std::unique_ptr<Channel>> channels(size);
  for (int r = 0; r < size; ++r) {
    if (r != rank) channels[r] = std::make_unique<MpiChannel>(context, r, params.timeout_s);
  }
  PERSEUS_LOG(INFO, kTransport) << "rank " << rank << ": MPI data plane to " << size - 1
                                << " peers";
  return channels;
}

#endif  // PERSEUS_HAVE_MPI

}  // namespace perseus::transport::mpi
