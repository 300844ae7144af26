// The α-β-γ cost model the registry ranks algorithms with (Thakur, Rabenseifner & Gropp 2005;
// docs/algorithms.md lists every estimate). Numbers are rough, per-host-class constants:
// they only need to order the algorithms correctly, not to predict times.
#pragma once

#include <cmath>
#include <cstddef>

#include "collectives/communicator.h"

namespace perseus::collectives::cost {

struct PointToPoint {
  double alpha_us;           // per message
  double beta_us_per_byte;   // per byte moved
  double gamma_us_per_byte;  // per byte reduced
};

// Messages between ranks of one host go through shared-memory rings; across hosts, TCP.
inline PointToPoint pointToPoint(const Communicator& comm) {
  if (comm.arena() != nullptr || comm.numHosts() == 1) return {2.0, 1.0 / 3000.0, 1.0 / 20000.0};
  return {30.0, 1.0 / 1000.0, 1.0 / 20000.0};
}

// Shared-memory arena: one barrier, and bytes copied or reduced through the caches.
constexpr double kBarrierUs = 0.15;
constexpr double kArenaUsPerByte = 1.0 / 30000.0;
// One cross-memory read of a peer's buffer (process_vm_readv): the call, and per byte one
// copy on the reader's core alone with the peer's pages pinned as it goes, measured at about
// two thirds of the rate of a copy through the arena (docs/algorithms.md, *Single-copy
// broadcasts and allgathers*).
constexpr double kCrossMemoryUs = 3.0;
constexpr double kCrossMemoryUsPerByte = 1.5 * kArenaUsPerByte;

inline int ceilLog2(int p) {
  int k = 0;
  while ((1 << k) < p) ++k;
  return k;
}

}  // namespace perseus::collectives::cost
