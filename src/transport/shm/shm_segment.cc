#include "transport/shm/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/logging.h"
#include "common/status.h"

namespace perseus::transport::shm {
namespace {

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

char* mapShared(int fd, size_t bytes, const std::string& name) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) {
    throw InternalError(PERSEUS_STR("mmap of shared-memory segment "
                                    << name << " (" << bytes
                                    << " bytes) failed: " << std::strerror(errno)));
  }
  return static_cast<char*>(p);
}

}  // namespace

std::string segmentName(const std::string& job_id, int global_rank) {
  std::string id = job_id.substr(0, 200);
  for (char& c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) c = '_';
  }
  return "/perseus-" + id + "-" + std::to_string(global_rank);
}

std::unique_ptr<ShmSegment> ShmSegment::create(const std::string& name, size_t bytes) {
  int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0 && errno == EEXIST) {
    // Names are unlinked right after start-up, so one that exists now was left by a job with
    // the same id that died during start-up. Its owner is gone; take the name over.
    PERSEUS_LOG(WARNING, kTransport) << "replacing stale shared-memory segment " << name;
    ::shm_unlink(name.c_str());
    fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  }
  if (fd < 0) {
    throw InternalError(PERSEUS_STR("cannot create shared-memory segment "
                                    << name << ": " << std::strerror(errno)
                                    << " (is /dev/shm mounted and writable?)"));
  }
  Fd guard(fd);
  const int rc = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (rc != 0) {
    ::shm_unlink(name.c_str());
    throw InternalError(PERSEUS_STR(
        "cannot reserve " << bytes << " bytes for shared-memory segment " << name << ": "
                          << std::strerror(rc) << ". /dev/shm is too small for this many local "
                          << "ranks: enlarge it (docker run --shm-size=...) or lower "
                          << "PERSEUS_SHM_RING_BYTES / PERSEUS_SHM_SLOT_BYTES"));
  }
  try {
    return std::unique_ptr<ShmSegment>(new ShmSegment(name, mapShared(fd, bytes, name), bytes));
  } catch (...) {
    ::shm_unlink(name.c_str());
    throw;
  }
}

std::unique_ptr<ShmSegment> ShmSegment::open(const std::string& name, const std::string& describe) {
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) {
    throw InternalError(
        PERSEUS_STR("cannot open shared-memory segment "
                    << name << " of " << describe << ": " << std::strerror(errno)
                    << " (it exists after the start-up barrier unless that rank "
                    << "already failed; see its log. Otherwise check that all local "
                    << "ranks run as the same user with the same job id)"));
  }
  Fd guard(fd);
  struct stat st;
  if (::fstat(fd, &st) != 0 || st.st_size <= 0) {
    throw InternalError(PERSEUS_STR("shared-memory segment " << name << " of " << describe
                                                             << " is empty or unreadable"));
  }
  const size_t bytes = static_cast<size_t>(st.st_size);
  return std::unique_ptr<ShmSegment>(new ShmSegment(name, mapShared(fd, bytes, name), bytes));
}

void ShmSegment::unlink(const std::string& name) {
  if (::shm_unlink(name.c_str()) != 0 && errno != ENOENT) {
    PERSEUS_LOG(WARNING, kTransport)
        << "shm_unlink(" << name << ") failed: " << std::strerror(errno);
  }
}

ShmSegment::~ShmSegment() { ::munmap(base_, bytes_); }

}  // namespace perseus::transport::shm
