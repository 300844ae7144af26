// Cache-sized pieces of a CPU allreduce group (Note [Cache-sized pieces]): which of a fusion
// group's tensors share one piece of the fusion buffer and which run alone on their own
// buffers. A pure function of the tensors' sizes, so every rank cuts the same pieces.
//
// Note [Cache-sized pieces]
// An allreduce group is run in pieces of at most kCpuPieceBytes: small tensors (up to
// kCpuAloneBytes) are packed into a piece of the fusion buffer, larger ones run alone on their
// own buffers: in one collective call that applies the postscale itself, or in pieces when a
// prescale must be copied first. A piece's fusion copy-in, its collective and its copy-out (or,
// for a tensor run alone, its prescale) all touch data that is still in the last-level cache,
// so the memory sees one read of each input and one write of each output, as for a single
// allreduce. One 64 MiB fusion buffer would make three passes through DRAM (copy-in,
// collective, copy-out).
#pragma once

#include <cstddef>
#include <vector>

namespace perseus::fusion {

// A piece, its input and its output together stay well inside a 32 MiB L3 shared by the ranks
// of a host. `perseus_collectives_bench model-step` (ResNet-50's gradients, 2 ranks) measures
// the choice: 0.5-2 MiB pieces put the step within 1.03-1.06x of one allreduce of the same
// bytes, 4 MiB 1.10-1.16x, one buffer 1.3x.
constexpr size_t kCpuPieceBytes = 2u << 20;
// Above this a tensor's collective runs on its own buffers: copying it into and out of the
// fusion buffer costs more than the collective's fixed per-call cost it would share (the same
// bench: 1.04-1.08x of one allreduce with 64 KiB, 1.14-1.19x with 256 KiB or 2 MiB).
constexpr size_t kCpuAloneBytes = 64u << 10;

struct CpuPiece {
  size_t begin = 0, end = 0;  // the group's items [begin, end)
  size_t bytes = 0;           // fusion-buffer bytes of a shared piece
  bool alone = false;         // one tensor on its own buffers (end == begin + 1)
};

// The piece that starts at item `begin` of a group of `n` items, whose bytes `bytes_of(i)`
// gives. `fused`: the group has more than one tensor (a group of one always runs alone,
// whatever its size). Allocates nothing: the CPU executor cuts every allreduce group with it.
template <typename BytesOf>
CpuPiece nextCpuPiece(const BytesOf& bytes_of, size_t n, size_t begin, bool fused) {
  auto alone = [&](size_t i) { return !fused || bytes_of(i) > kCpuAloneBytes; };
  CpuPiece p;
  p.begin = begin;
  p.end = begin + 1;
  if (alone(begin)) {
    p.alone = true;
    return p;
  }
  // Consecutive small tensors share a piece while it stays within kCpuPieceBytes.
  size_t i = begin;
  while (i < n && !alone(i) && p.bytes + bytes_of(i) <= kCpuPieceBytes) p.bytes += bytes_of(i++);
  p.end = i;
  return p;
}

// Every piece of a group, in order (nextCpuPiece from the first item to the last).
std::vector<CpuPiece> planCpuPieces(const std::vector<size_t>& item_bytes, bool fused);

}  // namespace perseus::fusion
