// Which slot and generation each pending post was posted in, by its handle's id (Note [Posted
// collectives] in posted_collectives.h): the lane's own record, so that a Handle knows nothing
// of the lane.
//
// Contract: add() and remove() by one thread at a time (the lane, under its mutex); find() by
// any thread, without a lock for the ids in the ring. Handle ids are handed out in sequence and
// never reused, so a pending post's id sits in the ring's place id mod kRingSize unless that
// place is taken (the ids of more than kRingSize handles apart), then in the overflow map. A
// place is read as a seqlock keyed by the id: find() re-reads the id after the slot and
// generation, so it never returns another post's place.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>

namespace perseus::engine {

class PostIds {
 public:
  struct Posted {
    size_t slot = 0;
    uint64_t gen = 0;
    bool lent = false;  // its buffer is read by address (Note [Posts by address])
  };

  PostIds();
  void add(int64_t id, Posted posted);
  void remove(int64_t id);
  // False when `id` is not a pending post (never posted, or settled since).
  bool find(int64_t id, Posted* out) const;

 private:
  static constexpr size_t kRingSize = size_t{1} << 12;
  static constexpr uint64_t kLentBit = uint64_t{1} << 63;
  struct Place {
    std::atomic<int64_t> id{0};     // 0: free (ids start at 1)
    std::atomic<uint64_t> slot{0};  // with kLentBit when lent
    std::atomic<uint64_t> gen{0};
  };
  Place& placeOf(int64_t id) const { return ring_[static_cast<size_t>(id) & (kRingSize - 1)]; }

  const std::unique_ptr<Place[]> ring_;
  mutable std::mutex overflow_mu_;
  std::unordered_map<int64_t, Posted> overflow_;  // guarded by overflow_mu_
  std::atomic<size_t> overflow_size_{0};
};

}  // namespace perseus::engine
