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

}  // namespace perseus::collectives
