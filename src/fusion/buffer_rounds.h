// Packing a batch of tensors into fusion-buffer rounds: a pure function (no device), so the
// engine-independent part of GPU fusion is tested on any machine.
//
// Each tensor is cut into pieces that fit; a round is one buffer's worth (one copy-in launch,
// one collective, one copy-out launch). Pieces start at `align_bytes` boundaries of the buffer
// so that the batched copy kernel can use 16-byte accesses; a tensor larger than the buffer
// spans several rounds. Counts and offsets are elements of the wire type.
#pragma once

#include <cstddef>
#include <vector>

namespace perseus::fusion {

struct FusionPiece {
  size_t tensor;         // index in the batch
  size_t offset;         // first element of the tensor in this piece
  size_t count;          // elements
  size_t buffer_offset;  // element offset in the fusion buffer
};

struct FusionRound {
  std::vector<FusionPiece> pieces;
  size_t count = 0;  // elements of the buffer the collective covers (pieces + alignment gaps)
};

// capacity_bytes >= align_bytes; elem_bytes divides align_bytes. Empty tensors get no piece.
std::vector<FusionRound> planRounds(const std::vector<size_t>& counts, size_t elem_bytes,
                                    size_t capacity_bytes, size_t align_bytes = 64);

}  // namespace perseus::fusion
