#include "collectives/from_posts.h"

#include <cstring>

#include "kernels/reduce.h"

namespace perseus::collectives {

void reduceFromPosts(void* out, const void* const* posts, int n, size_t count, DataType dtype,
                     ReduceOp op, double postscale) {
  kernels::reduceN(out, posts, n, count, dtype, op);
  if (postscale != 1.0) kernels::scale(out, count, dtype, postscale);
}

void gatherFromPosts(void* out, const void* const* posts, const size_t* bytes, int n) {
  auto* dst = static_cast<unsigned char*>(out);
  for (int r = 0; r < n; ++r) {
    if (bytes[r] == 0) continue;  // a rank with no rows may have no buffer either
    std::memcpy(dst, posts[r], bytes[r]);
    dst += bytes[r];
  }
}

void copyFromPost(void* out, const void* root_post, size_t bytes) {
  if (root_post != out) std::memcpy(out, root_post, bytes);
}

void finishFromPosts(const PostBoard& board, uint64_t gen, const FromPosts& how, const void* own,
                     void* out) {
  const int n = board.size();
  if (how.kind == FromPosts::Kind::kCopyRoot) {
    copyFromPost(out, how.root == board.rank() ? own : board.payload(how.root, gen, how.offset),
                 how.bytes);
    return;
  }
  // A post per rank: on the stack up to 64 ranks, the most one host runs in practice.
  const void* stack[64];
  std::vector<const void*> many;
  const void** posts = stack;
  if (n > 64) {
    many.resize(static_cast<size_t>(n));
    posts = many.data();
  }
  for (int r = 0; r < n; ++r) posts[r] = board.payload(r, gen, how.offset);
  if (how.kind == FromPosts::Kind::kReduce) {
    reduceFromPosts(out, posts, n, how.count, how.dtype, how.op, how.postscale);
  } else {
    gatherFromPosts(out, posts, how.piece_bytes.data(), n);
  }
}

}  // namespace perseus::collectives
