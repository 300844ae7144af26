#include "engine/posted/post_slots.h"

#include <algorithm>

#include "common/logging.h"
#include "engine/exec/executor.h"

namespace perseus::engine {
namespace {

// Pool offsets keep every payload on its own cache lines (and the reduction aligned).
constexpr size_t kAlign = 64;

}  // namespace

PostSlots::PostSlots(collectives::PostBoard* board, size_t lend_max_bytes)
    : board_(board), lend_max_bytes_(lend_max_bytes) {
  if (board_ != nullptr) slots_.reserve(board_->numSlots());
}

bool PostSlots::postable(OpType kind, bool cuda, size_t tensors) {
  return !cuda && tensors == 1 &&
         (kind == OpType::kAllreduce || kind == OpType::kBroadcast || kind == OpType::kAllgather ||
          kind == OpType::kReducescatter);
}

bool PostSlots::fitsCallerOutput(const PostSlot& s, const Call& c, int size) {
  if (c.outputs.empty() || c.outputs[0] == nullptr) return true;
  if (s.kind == OpType::kAllgather)
    return !s.meta.shape.empty() && s.out_shape[0] == size * s.meta.shape[0];
  if (s.kind == OpType::kReducescatter)
    return !s.meta.shape.empty() && s.out_shape[0] * size == s.meta.shape[0];
  return true;
}

bool PostSlots::matches(const PostSlot& s, const Call& c) {
  const TensorView& in = c.inputs[0];
  if (c.op != s.kind || in.dtype != s.meta.dtype || in.ndim != s.meta.shape.size() ||
      !std::equal(s.meta.shape.begin(), s.meta.shape.end(), in.shape)) {
    return false;
  }
  if (reduces(s.kind)) {
    return c.reduce_op == s.reduce_op && c.prescale == s.prescale && c.postscale == s.postscale;
  }
  return s.kind != OpType::kBroadcast || c.root == s.root;
}

bool PostSlots::describe(const Response& r, PostSlot* slot, size_t* bytes) const {
  const int size = board_->size(), rank = board_->rank();
  PostSlot& s = *slot;
  s.kind = r.op;
  s.meta = r.tensors[0];
  s.reduce_op = r.reduce_op;
  s.prescale = r.prescale;
  s.postscale = r.postscale;
  s.root = r.root;
  collectives::FromPosts& how = s.from_posts;
  how.dtype = s.meta.dtype;
  if (reduces(r.op)) {
    const Reduction red = reductionOf(r, size);
    how.op = red.op;
    how.postscale = red.postscale;
  }
  *bytes = s.meta.bytes();
  if (r.op == OpType::kAllgather) {
    // The response holds the first rank's shape; every rank's rows are in first_dims.
    if (r.first_dims.size() != static_cast<size_t>(size) || s.meta.shape.empty()) return false;
    const size_t row_bytes = static_cast<size_t>(s.meta.rowElements()) * dataTypeSize(s.meta.dtype);
    how.kind = collectives::FromPosts::Kind::kGather;
    int64_t total = 0, most = 0;
    for (int64_t n : r.first_dims) {
      total += n;
      most = std::max(most, n);
      how.piece_bytes.push_back(static_cast<size_t>(n) * row_bytes);
    }
    s.out_shape = s.meta.shape;
    s.out_shape[0] = total;
    s.meta.shape[0] = r.first_dims[static_cast<size_t>(rank)];
    *bytes = static_cast<size_t>(most) * row_bytes;
  } else if (r.op == OpType::kReducescatter) {
    // Every rank posts its whole input and reduces its own block of rows from every post.
    if (s.meta.shape.empty()) return false;
    const int64_t row_elems = s.meta.rowElements();
    int64_t start = 0;
    for (int q = 0; q < rank; ++q) start += blockRows(s.meta.shape[0], size, q);
    how.offset = static_cast<size_t>(start * row_elems) * dataTypeSize(s.meta.dtype);
    s.out_shape = s.meta.shape;
    s.out_shape[0] = blockRows(s.meta.shape[0], size, rank);
    how.count = static_cast<size_t>(s.out_shape[0] * row_elems);
  } else if (r.op == OpType::kBroadcast) {
    how.kind = collectives::FromPosts::Kind::kCopyRoot;
    how.root = r.root;
    how.bytes = *bytes;
  } else {
    how.count = static_cast<size_t>(s.meta.numElements());
  }
  return true;
}

void PostSlots::learn(const Response& r, bool may_add, std::shared_ptr<Handle> negotiated) {
  if (board_ == nullptr || r.is_error ||
      !postable(r.op, r.device_kind == DeviceKind::kCuda, r.tensors.size())) {
    return;
  }
  auto it = by_name_.find(r.name);
  const bool had_slot = it != by_name_.end();
  if (had_slot) {
    // Another negotiated run of a name with a slot: every rank retires the old slot here
    // (revoking it if no rank has), so all give the name the same new one below.
    PostSlot& old = slots_[it->second];
    if (!old.dead) board_->revoke(it->second, 0);
    old.dead = true;
    old.negotiated.reset();
    by_name_.erase(it);
    ++retired_[r.name];
  }
  // Posting reduces element-wise from every rank's post: never Adasum (Note [Adasum]).
  if (r.reduce_op == ReduceOp::kAdasum) return;
  // Slots are never reused: a name whose posts keep falling back (a rank that is regularly
  // late past the patience, say while it writes a checkpoint) stays negotiated after a few.
  if (auto gone = retired_.find(r.name);
      gone != retired_.end() && gone->second >= kMaxSlotsPerName) {
    return;
  }
  PostSlot s;
  size_t bytes = 0;  // the largest contribution of a rank
  if (!may_add || !describe(r, &s, &bytes)) return;
  const size_t span = placeFor(&s, bytes);
  const bool large = bytes > kMaxBytes && !s.address_only;
  if (span == 0) return;
  if (large && large_bytes_ + span > largeShare(board_->poolBytes())) return;
  // Only names that could be posted enter the table: the others would take places (and evict
  // first sightings of names that can) at every negotiated run.
  if (!had_slot && !secondSighting(r.name)) return;
  if (slots_.size() >= board_->numSlots() || next_offset_ + span > board_->poolBytes()) {
    if (!full_reported_) {
      full_reported_ = true;
      PERSEUS_LOG(INFO, kEngine) << "the post board is full (" << slots_.size() << " slots, "
                                 << next_offset_
                                 << " pool bytes): collectives of names not "
                                    "posted so far are negotiated every time";
    }
    return;
  }
  s.name = std::make_shared<const std::string>(r.name);
  s.index = slots_.size();
  s.offset = next_offset_;
  s.from_posts.offset += next_offset_;
  s.from_posts.lend_offset += next_offset_;
  s.negotiated = std::move(negotiated);
  next_offset_ += span;
  if (large) large_bytes_ += span;
  by_name_.emplace(r.name, slots_.size());
  slots_.push_back(std::move(s));
}

size_t PostSlots::placeFor(PostSlot* s, size_t bytes) const {
  if (bytes == 0) return 0;
  const auto align = [](size_t b) { return (b + kAlign - 1) / kAlign * kAlign; };
  const bool copies = s->kind == OpType::kBroadcast || s->kind == OpType::kAllgather;
  // Note [Broadcast in parts] (collectives/single_copy_shm.cc): readers of one process slow
  // each other down, so a broadcast too large for the pools is posted by address only with one
  // reader.
  const bool lend_large = s->kind == OpType::kAllgather || board_->size() == 2;
  if (!copies || lend_max_bytes_ == 0 || bytes < kMinLendBytes || bytes > lend_max_bytes_ ||
      (bytes > kMaxCopyBytes && !lend_large)) {
    return bytes > maxBytes(s->kind) ? 0 : align(bytes);
  }
  s->from_posts.lends = true;
  s->address_only = bytes > kMaxCopyBytes;
  const size_t data = s->address_only ? 0 : align(bytes);
  s->from_posts.lend_offset = data;  // after the payload (made absolute with the slot's offset)
  return data + kAlign;
}

bool PostSlots::secondSighting(const std::string& name) {
  // FNV-1a: the same value in every process, unlike std::hash.
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : name) h = (h ^ ch) * 1099511628211ull;
  h |= 1;  // 0 marks an empty entry
  // Two places per name: with one, two names of a model that share it would evict each other
  // at every step and never get a slot (300 names, 1024 places: 163 of the 256 that fit the
  // pool were posted, tests/cpp/engine_posted_collectives_test.cc).
  const size_t mask = seen_once_.size() - 1;
  uint64_t& first = seen_once_[h & mask];
  uint64_t& second = seen_once_[((h * 0x9E3779B97F4A7C15ull) >> 32) & mask];
  for (uint64_t* seen : {&first, &second}) {
    if (*seen == h) {
      *seen = 0;
      return true;
    }
  }
  // Both taken: evict one, chosen by the name, so every rank evicts the same.
  (first == 0 ? first : second == 0 ? second : (h & 2) ? first : second) = h;
  return false;
}

}  // namespace perseus::engine
