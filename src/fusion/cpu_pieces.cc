#include "fusion/cpu_pieces.h"

namespace perseus::fusion {

std::vector<CpuPiece> planCpuPieces(const std::vector<size_t>& item_bytes, bool fused) {
  std::vector<CpuPiece> pieces;
  auto bytes_of = [&](size_t i) { return item_bytes[i]; };
  for (size_t i = 0; i < item_bytes.size(); i = pieces.back().end)
    pieces.push_back(nextCpuPiece(bytes_of, item_bytes.size(), i, fused));
  return pieces;
}

}  // namespace perseus::fusion
