// One POSIX shared-memory object mapped into this process (RAII). create() makes a new name
// with mode 0600 and reserves its pages in /dev/shm up front, so a too-small /dev/shm fails
// here with a clear message instead of SIGBUS later; both create() and open() pre-fault the
// whole mapping (MAP_POPULATE) so that no call later pays a page fault.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace perseus::transport::shm {

class ShmSegment {
 public:
  // Throws InternalError (naming the segment, the size and /dev/shm) on failure. A stale
  // object of the same name (left by a killed job with the same id) is replaced.
  static std::unique_ptr<ShmSegment> create(const std::string& name, size_t bytes);
  // Maps an existing object; `describe` names its owner in error messages. Returns the mapping
  // of the object's actual size, which the caller validates against what it expects.
  static std::unique_ptr<ShmSegment> open(const std::string& name, const std::string& describe);
  // Removes the name (mappings stay valid). ENOENT is not an error.
  static void unlink(const std::string& name);

  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  char* base() const { return base_; }
  size_t bytes() const { return bytes_; }
  const std::string& name() const { return name_; }

 private:
  ShmSegment(std::string name, char* base, size_t bytes)
      : name_(std::move(name)), base_(base), bytes_(bytes) {}

  std::string name_;
  char* base_;
  size_t bytes_;
};

// "/perseus-<job id>-<global rank>", with characters that are not [A-Za-z0-9._-] in the job id
// replaced by '_' and the id shortened to fit NAME_MAX.
std::string segmentName(const std::string& job_id, int global_rank);

}  // namespace perseus::transport::shm
