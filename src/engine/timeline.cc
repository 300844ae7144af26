#include "engine/timeline.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/logging.h"
#include "common/status.h"

namespace perseus::engine {
namespace {

std::string jsonEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string Timeline::pathForRank(const std::string& path, int rank, int size) {
  if (size <= 1) return path;
  const std::string ext = ".json";
  if (path.size() > ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0) {
    return path.substr(0, path.size() - ext.size()) + "." + std::to_string(rank) + ext;
  }
  return path + "." + std::to_string(rank);
}

Timeline::Timeline(const std::string& path, int rank)
    : path_(path), rank_(rank), origin_(Clock::now()) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    throw InvalidArgumentError(PERSEUS_STR("PERSEUS_TIMELINE: cannot write '"
                                           << path << "': " << std::strerror(errno)
                                           << "; give a writable path or unset it"));
  }
  const char start[] = "[\n\n]";
  if (::pwrite(fd_, start, 4, 0) != 4) {
    PERSEUS_LOG(WARNING, kTimeline) << "cannot write timeline " << path;
  }
  end_pos_ = 2;
  // Ranks as processes, and the wall-clock time of this file's ts 0, so that
  // `perseus-timeline merge` can line the ranks' files up on one clock.
  const auto unix_us = std::chrono::duration_cast<std::chrono::microseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
  pending_ = PERSEUS_STR("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":"
                         << rank << ",\"args\":{\"name\":\"rank " << rank
                         << "\"}},\n{\"name\":\"perseus_clock\",\"ph\":\"M\",\"pid\":" << rank
                         << ",\"args\":{\"origin_unix_us\":" << unix_us << "}}");
}

Timeline::~Timeline() {
  flush();
  if (fd_ >= 0) ::close(fd_);
}

int Timeline::trackOf(const std::string& tensor) {
  auto it = tracks_.find(tensor);
  if (it != tracks_.end()) return it->second;
  int id = static_cast<int>(tracks_.size()) + 1;
  tracks_.emplace(tensor, id);
  pending_ +=
      PERSEUS_STR((pending_.empty() && !any_written_ ? "" : ",\n")
                  << "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" << rank_ << ",\"tid\":" << id
                  << ",\"args\":{\"name\":\"" << jsonEscape(tensor) << "\"}}");
  return id;
}

void Timeline::span(const std::string& tensor, const char* phase, Clock::time_point start,
                    Clock::time_point end) {
  int tid = trackOf(tensor);
  auto us = [&](Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); };
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "%s{\"name\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,\"tid\":%d}",
                pending_.empty() && !any_written_ ? "" : ",\n", phase, us(start - origin_),
                us(end - start), rank_, tid);
  pending_ += buf;
}

void Timeline::flush() {
  if (pending_.empty() || fd_ < 0) return;
  std::string chunk = pending_ + "\n]";
  ssize_t n = ::pwrite(fd_, chunk.data(), chunk.size(), end_pos_);
  if (n != static_cast<ssize_t>(chunk.size())) {
    PERSEUS_LOG(WARNING, kTimeline) << "short write to timeline " << path_ << "; closing it";
    ::close(fd_);
    fd_ = -1;
    return;
  }
  end_pos_ += static_cast<long>(pending_.size());
  any_written_ = true;
  pending_.clear();
}

}  // namespace perseus::engine
