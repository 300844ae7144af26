// Note [Response cache]
// Horovod's idea: once a name has been negotiated, the same request (same metadata) later
// needs no coordinator. Every rank holds an identical cache: entries are added, touched and
// evicted only while executing the response list that the coordinator broadcast (or the
// cached responses picked by the control vector), which is the same on every rank in the same
// order. So the bit that stands for a name is the same everywhere, and a cycle decides what is
// ready with one AND-allreduce of a bit vector (see control.h), whatever the tensor count.
//
// Each rank also remembers its own request metadata for the entry (allgather/alltoall ranks
// differ in the first dimension), which is what a new local request is compared against.
//
// Thread contract: the Cycle, under the cycle lock (cycle.h).
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "negotiation/request.h"

namespace perseus::engine {

class ResponseCache {
 public:
  explicit ResponseCache(size_t capacity);

  enum class Lookup { kMiss, kHit, kInvalid };
  struct Result {
    Lookup state = Lookup::kMiss;
    int bit = -1;
  };
  // kHit when `name` is cached with this rank's identical metadata, kInvalid when the name is
  // cached with different metadata (its bit must be invalidated on every rank).
  Result lookup(const Request& request) const;

  // Adds (or replaces) the entry for a successful response. `own` is this rank's request, or
  // null when this rank had none (joined). Returns the bit evicted to make room, or -1.
  int put(const Response& response, const Request* own);
  // Marks `bit` most recently used. Call for every cached response executed, in list order.
  void touch(int bit);
  void erase(int bit);

  const Response& response(int bit) const;
  bool has(int bit) const;
  // Bits in use are all < numBits(); the control vector covers [0, numBits()).
  int numBits() const { return static_cast<int>(slots_.size()); }
  size_t size() const { return by_name_.size(); }
  size_t capacity() const { return capacity_; }

 private:
  struct Slot {
    bool used = false;
    Response response;
    std::optional<Request> own;
    std::list<int>::iterator lru_pos;
  };
  size_t capacity_;
  std::vector<Slot> slots_;
  std::vector<int> free_bits_;  // kept sorted descending: back() is the lowest free bit
  std::unordered_map<std::string, int> by_name_;
  std::list<int> lru_;  // front: least recently used
};

}  // namespace perseus::engine
