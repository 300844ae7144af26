#include "fusion/cpu_pieces.h"

namespace perseus::fusion {

std::vector<CpuPiece> planCpuPieces(const std::vector<size_t>& item_bytes, bool fused) {
  std::vector<CpuPiece> pieces;
  auto alone = [&](size_t i) { return !fused || item_bytes[i] > kCpuAloneBytes; };
  size_t i = 0;
  while (i < item_bytes.size()) {
    CpuPiece p;
    p.begin = i;
    if (alone(i)) {
      p.alone = true;
      p.end = ++i;
      pieces.push_back(p);
      continue;
    }
    // Consecutive small tensors share a piece while it stays within kCpuPieceBytes.
    while (i < item_bytes.size() && !alone(i) && p.bytes + item_bytes[i] <= kCpuPieceBytes) {
      p.bytes += item_bytes[i++];
    }
    p.end = i;
    pieces.push_back(p);
  }
  return pieces;
}

}  // namespace perseus::fusion
