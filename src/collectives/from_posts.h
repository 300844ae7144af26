// Finishing a posted collective (Note [Posted collectives], engine/posted/posted_collectives.h)
// from the contributions every rank left in its post pool: the data movement only, the same on
// every rank, with no message exchanged. `posts[r]` is set rank r's contribution.
//
// An allreduce reduces the posts in rank order, so every rank gets the same bits; a
// reducescatter does the same over its own block of rows; a broadcast copies the root's post;
// an allgather concatenates every rank's in rank order.
#pragma once

#include <cstddef>
#include <vector>

#include "collectives/post_board.h"
#include "collectives/post_lending.h"
#include "common/dtype.h"

namespace perseus::collectives {

// How a posted collective makes its result from one generation's posts: fixed when its name
// is given a slot, the same on every generation.
struct FromPosts {
  enum class Kind {
    kReduce,    // an allreduce, or a reducescatter over this rank's block of rows
    kGather,    // an allgather: every rank's rows in rank order
    kCopyRoot,  // a broadcast: the root's post
  };
  Kind kind = Kind::kReduce;
  size_t offset = 0;  // where the slot's payload starts in a pool (a reducescatter: its block)
  // kReduce: `count` elements of every post, reduced with `op`, then scaled by `postscale`.
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  double postscale = 1.0;
  std::vector<size_t> piece_bytes;  // kGather: each rank's bytes
  int root = 0;                     // kCopyRoot
  size_t bytes = 0;                 // kCopyRoot
  // kGather, kCopyRoot: posts may be by address, described at this offset of each pool
  // (post_lending.h); false: every post is in the pool.
  bool lends = false;
  size_t lend_offset = 0;
};

// Writes generation `gen`'s result into `out`, reading every rank's post on `board`, those
// posted by address through `lending` (null when none can be). `own` is this rank's input,
// which a broadcast's root and an allgather's own rows come from (an in-place root has nothing
// to do). Returns 0, or the errno of a read by address that failed (the rest is still copied).
int finishFromPosts(const PostBoard& board, const PostLending* lending, uint64_t gen,
                    const FromPosts& how, const void* own, void* out);

// out = postscale * (op over the n posts of `count` elements each). op is never kAverage.
void reduceFromPosts(void* out, const void* const* posts, int n, size_t count, DataType dtype,
                     ReduceOp op, double postscale);

// out = post[0] (bytes[0] bytes) ++ post[1] ++ ... ++ post[n-1].
void gatherFromPosts(void* out, const void* const* posts, const size_t* bytes, int n);

// out = the root's post (`bytes` bytes); nothing to do when they are the same buffer.
void copyFromPost(void* out, const void* root_post, size_t bytes);

}  // namespace perseus::collectives
