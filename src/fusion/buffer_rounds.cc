#include "fusion/buffer_rounds.h"

#include <algorithm>

#include "common/status.h"

namespace perseus::fusion {

std::vector<FusionRound> planRounds(const std::vector<size_t>& counts, size_t elem_bytes,
                                    size_t capacity_bytes, size_t align_bytes) {
  PERSEUS_CHECK(elem_bytes > 0 && align_bytes % elem_bytes == 0 && capacity_bytes >= align_bytes,
                "planRounds(elem " << elem_bytes << ", capacity " << capacity_bytes << ", align "
                                   << align_bytes << ")");
  const size_t capacity = capacity_bytes / elem_bytes;
  const size_t align = align_bytes / elem_bytes;
  std::vector<FusionRound> rounds;
  FusionRound current;
  size_t used = 0;  // aligned elements of the current round
  for (size_t t = 0; t < counts.size(); ++t) {
    size_t offset = 0;
    while (offset < counts[t]) {
      if (used >= capacity) {
        rounds.push_back(std::move(current));
        current = FusionRound();
        used = 0;
      }
      const size_t n = std::min(counts[t] - offset, capacity - used);
      current.pieces.push_back(FusionPiece{t, offset, n, used});
      current.count = used + n;
      used = std::min(capacity, (used + n + align - 1) / align * align);
      offset += n;
    }
  }
  if (!current.pieces.empty()) rounds.push_back(std::move(current));
  return rounds;
}

}  // namespace perseus::fusion
