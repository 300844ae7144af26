// The slots of the posted collectives (Note [Posted collectives] in posted_collectives.h):
// which names have one, what each remembers of its name's negotiated run, and where its
// payload lies in every rank's pools. Every rank learns the same responses in the same order,
// so a name gets the same slot and pool offset on every rank.
//
// Contract: PostedCollectives, under its mutex. A slot's learned part (above "guarded" in
// PostSlot) never changes once the slot exists, and the vector never reallocates, so a thread
// that settles a post reads it without the mutex.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "collectives/from_posts.h"
#include "collectives/post_board.h"
#include "engine/call.h"
#include "engine/handle.h"
#include "negotiation/request.h"

namespace perseus::engine {

struct PostSlot {
  OpType kind = OpType::kAllreduce;
  Handle::Name name;  // shared with the handles of its posts
  TensorMeta meta;    // this rank's input
  ReduceOp reduce_op = ReduceOp::kSum;
  double prescale = 1.0, postscale = 1.0;
  int32_t root = 0;
  std::vector<int64_t> out_shape;     // allgather, reducescatter: the library-owned output
  size_t index = 0;                   // on the board
  size_t offset = 0;                  // this rank's payload in its pools
  bool address_only = false;          // too large for the pools: posted by address or not at all
  collectives::FromPosts from_posts;  // how a complete generation's result is made
  // Guarded by the owner's mutex:
  uint64_t gen = 0;                    // this rank's last posted generation
  bool dead = false;                   // revoked (seen by this rank) or replaced
  std::shared_ptr<Handle> negotiated;  // until it completed: no posts yet
  // The pending post, if any (non-null handle).
  std::shared_ptr<Handle> pending;
  // The pending post's tensors: written before its handle is handed out and kept until it is
  // dropped, so whoever claimed it reads them without the mutex.
  const void* input = nullptr;
  void* output = nullptr;
  bool lent = false;  // the peers read `input` by address: it completes once they all have
  // A lent post that waits for the peers' reads: since when the sweeps saw it wait, and when
  // they next look whether a reader's process is gone (PostedCollectives::unreadLocked()).
  std::chrono::steady_clock::time_point unread_since{}, unread_check{};
  size_t pending_pos = 0;  // index in the owner's pending list
  int64_t pending_id = 0;  // the pending post's handle id (PostIds)
};

class PostSlots {
 public:
  // The largest contribution a rank posts to a reduction: beyond it, reading every rank's
  // input costs more than the negotiated collective's exchanges (docs/algorithms.md, "Posted
  // collectives").
  static constexpr size_t kMaxBytes = 4u << 10;
  // The largest to a broadcast or an allgather: each rank reads the root's post or the rows its
  // result holds anyway, one copy as in the negotiated collective, which adds a cycle to it.
  static constexpr size_t kMaxCopyBytes = 64u << 10;
  // The most bytes of each pool that contributions over kMaxBytes may take together, so that
  // the names of small ones still find room after a model's mid-sized ones.
  static size_t largeShare(size_t pool_bytes) { return pool_bytes / 2; }
  static size_t maxBytes(OpType kind) { return reduces(kind) ? kMaxBytes : kMaxCopyBytes; }
  // The smallest contribution to a broadcast or an allgather that may be posted by address
  // (Note [Posts by address] in posted_collectives.h): below it, copying through the pool
  // costs less than the system call and the wait for the readers.
  static constexpr size_t kMinLendBytes = 8u << 10;
  // Slots one name may be given in a job (each fall-back retires one).
  static constexpr int kMaxSlotsPerName = 4;

  // Slots on `board`, which outlives this (null: posting is off, and nothing is learned).
  // Broadcasts and allgathers of up to `lend_max_bytes` per rank may be posted by address
  // (PERSEUS_POSTED_BY_ADDRESS; 0: none).
  PostSlots(collectives::PostBoard* board, size_t lend_max_bytes);

  // Whether a collective of this kind, device and tensor count can ever be posted: calls and
  // negotiated responses alike.
  static bool postable(OpType kind, bool cuda, size_t tensors);
  // An allgather into the caller's buffer, which holds `size` times its input, posts only while
  // every rank's rows are its own; a reduce-scatter into one, while the rows split evenly (Note
  // [Allgather into]).
  static bool fitsCallerOutput(const PostSlot& s, const Call& c, int size);
  // Whether call `c` is what slot `s` was negotiated for (the same metadata).
  static bool matches(const PostSlot& s, const Call& c);
  // Whether posts of this kind are reduced (and prescaled when posted).
  static bool reduces(OpType kind) {
    return kind == OpType::kAllreduce || kind == OpType::kReducescatter;
  }

  // A negotiated response of the global set, run before its entries complete: a name seen
  // the second time gets a slot (the first time is remembered), and another run of a name with
  // a slot retires that slot (revoking it on the board) and gives the name a new one.
  // `may_add` false: retire only. `negotiated`: this rank's handle of the response (null if it
  // has none); the new slot takes posts once it completed.
  void learn(const Response& r, bool may_add, std::shared_ptr<Handle> negotiated);

  // The slot of `name`, or -1.
  int64_t find(const std::string& name) const {
    auto it = by_name_.find(name);
    return it == by_name_.end() ? -1 : static_cast<int64_t>(it->second);
  }
  PostSlot& operator[](size_t index) { return slots_[index]; }
  const PostSlot& operator[](size_t index) const { return slots_[index]; }
  size_t size() const { return slots_.size(); }

 private:
  // A name gets a slot at its second negotiated run, not its first: names used once (an
  // unnamed op gets a fresh name per call, `allreduce.noname.N`) would otherwise fill the
  // board, after which no new name is posted, and grow the registry by ~170 B per op
  // (tests/python/reliability/test_soak.py). The table holds each name's hash in one of two
  // places and changes alike on every rank (the same responses in the same order); an
  // eviction only delays a slot.
  bool secondSighting(const std::string& name);
  // The slot for `r` without its place (kind, metadata, how it finishes), and the most bytes
  // a rank posts; false when `r` cannot be posted.
  bool describe(const Response& r, PostSlot* s, size_t* bytes) const;
  // The pool bytes slot `s` takes for a rank's contribution of `bytes`, with its descriptor
  // when it may be posted by address (which it marks); 0 when it cannot be posted.
  size_t placeFor(PostSlot* s, size_t bytes) const;

  collectives::PostBoard* const board_;
  const size_t lend_max_bytes_;
  std::vector<PostSlot> slots_;  // by slot index; size() is the next free slot
  size_t next_offset_ = 0;
  size_t large_bytes_ = 0;  // the pool bytes of slots over kMaxBytes
  bool full_reported_ = false;
  std::unordered_map<std::string, size_t> by_name_;
  std::unordered_map<std::string, int> retired_;  // slots retired per name
  // Hashes of names negotiated once, no slot yet (secondSighting()); a power of two.
  std::vector<uint64_t> seen_once_ = std::vector<uint64_t>(size_t{1} << 14);
};

}  // namespace perseus::engine
