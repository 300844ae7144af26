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

namespace {

// Rank r's post of `bytes` into `to`: by address when it lent its buffer, else from its pool.
int copyPost(const PostBoard& board, const PostLending* lending, uint64_t gen, const FromPosts& how,
             int r, size_t at, void* to, size_t bytes) {
  const uint64_t address =
      how.lends ? PostLending::addressIn(board.payload(r, gen, how.lend_offset)) : 0;
  if (address != 0 && lending != nullptr) return lending->read(r, address + at, to, bytes);
  std::memcpy(to, board.payload(r, gen, how.offset) + at, bytes);
  return 0;
}

// Every rank's rows in rank order: the peers' from their posts, starting after this rank (so
// that readers of one host do not all start at the same peer), this rank's from its input.
int gatherPosts(const PostBoard& board, const PostLending* lending, uint64_t gen,
                const FromPosts& how, const void* own, void* out) {
  const int n = board.size(), rank = board.rank();
  auto* dst = static_cast<unsigned char*>(out);
  auto at = [&](int r) {
    size_t a = 0;
    for (int q = 0; q < r; ++q) a += how.piece_bytes[q];
    return a;
  };
  unsigned char* mine = dst + at(rank);
  if (how.piece_bytes[rank] > 0 && mine != own) std::memmove(mine, own, how.piece_bytes[rank]);
  int err = 0;
  for (int k = 1; k < n; ++k) {
    const int r = (rank + k) % n;
    if (how.piece_bytes[r] == 0) continue;  // a rank with no rows may have no buffer either
    const int e = copyPost(board, lending, gen, how, r, 0, dst + at(r), how.piece_bytes[r]);
    if (err == 0) err = e;
  }
  // An allgather into the caller's buffer may have its input there already.
  return err;
}

}  // namespace

int finishFromPosts(const PostBoard& board, const PostLending* lending, uint64_t gen,
                    const FromPosts& how, const void* own, void* out) {
  const int n = board.size();
  if (how.kind == FromPosts::Kind::kCopyRoot) {
    if (how.root == board.rank()) {
      copyFromPost(out, own, how.bytes);
      return 0;
    }
    return copyPost(board, lending, gen, how, how.root, 0, out, how.bytes);
  }
  if (how.kind == FromPosts::Kind::kGather) return gatherPosts(board, lending, gen, how, own, out);
  // A post per rank: on the stack up to 64 ranks, the most one host runs in practice.
  const void* stack[64];
  std::vector<const void*> many;
  const void** posts = stack;
  if (n > 64) {
    many.resize(static_cast<size_t>(n));
    posts = many.data();
  }
  for (int r = 0; r < n; ++r) posts[r] = board.payload(r, gen, how.offset);
  reduceFromPosts(out, posts, n, how.count, how.dtype, how.op, how.postscale);
  return 0;
}

}  // namespace perseus::collectives
