// Chrome-trace / Perfetto timeline of one rank (PERSEUS_TIMELINE): per tensor, the phases
// NEGOTIATE, QUEUE, MEMCPY_IN_FUSION, COMMUNICATE, MEMCPY_OUT as complete ("X") events, one
// track (tid) per tensor name. CUDA tensors have NEGOTIATE, QUEUE, LAUNCH (enqueueing on the
// device) and COMMUNICATE (from the enqueue until the engine saw the GPU finish).
//
// The file is valid JSON after every flush: events are appended in front of the closing
// bracket with one pwrite, so a job that dies abruptly still leaves a loadable trace.
//
// Thread contract: the engine thread only. Events are buffered and written by flush(), which
// the engine calls once per cycle that recorded something.
#pragma once

#include <chrono>
#include <string>
#include <unordered_map>

namespace perseus::engine {

class Timeline {
 public:
  using Clock = std::chrono::steady_clock;

  // Truncates `path`. Throws InvalidArgumentError naming the path if it cannot be written.
  Timeline(const std::string& path, int rank);
  ~Timeline();
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  // The file name for `rank` when several ranks share one PERSEUS_TIMELINE value:
  // "t.json" -> "t.3.json" (unchanged when size == 1).
  static std::string pathForRank(const std::string& path, int rank, int size);

  void span(const std::string& tensor, const char* phase, Clock::time_point start,
            Clock::time_point end);
  void flush();
  const std::string& path() const { return path_; }

 private:
  int trackOf(const std::string& tensor);

  std::string path_;
  int rank_;
  int fd_ = -1;
  long end_pos_ = 0;  // where the next event goes: just before the closing "\n]"
  bool any_written_ = false;
  std::string pending_;
  Clock::time_point origin_;
  std::unordered_map<std::string, int> tracks_;
};

}  // namespace perseus::engine
