// Finishing a posted collective (Note [Posted collectives], engine/posted_collectives.h) from
// the contributions every rank left in its post pool: the data movement only, the same on
// every rank, with no message exchanged. `posts[r]` is set rank r's contribution.
//
// An allreduce reduces the posts in rank order, so every rank gets the same bits; a
// reducescatter does the same over its own block of rows; a broadcast copies the root's post;
// an allgather concatenates every rank's in rank order.
#pragma once

#include <cstddef>

#include "common/dtype.h"

namespace perseus::collectives {

// out = postscale * (op over the n posts of `count` elements each). op is never kAverage.
void reduceFromPosts(void* out, const void* const* posts, int n, size_t count, DataType dtype,
                     ReduceOp op, double postscale);

// out = post[0] (bytes[0] bytes) ++ post[1] ++ ... ++ post[n-1].
void gatherFromPosts(void* out, const void* const* posts, const size_t* bytes, int n);

// out = the root's post (`bytes` bytes); nothing to do when they are the same buffer.
void copyFromPost(void* out, const void* root_post, size_t bytes);

}  // namespace perseus::collectives
