// Single-copy reads between the members of one host (transport/shm/cross_memory.h), for the
// algorithms built on them: single_copy_shm.cc (broadcast, allgatherv),
// allreduce_single_copy.cc and reducescatter_single_copy.cc. Each member publishes its process id
// and up to two buffer addresses at the start of its own slot before a barrier; after it, any
// member copies ranges of those buffers straight out of the member's memory, until the barrier that
// ends the call. Members only read peers' slots between those barriers and write their own before
// the first (Note [Arena slot discipline], arena_view.h), so a fall-back to a slot algorithm starts
// cleanly after the last one.
#pragma once

#include <cstddef>
#include <vector>

#include "collectives/arena_view.h"
#include "collectives/communicator.h"
#include "collectives/registry.h"

namespace perseus::collectives::single_copy {

// This member's buffers, for its peers to read after the next barrier: `first` is buffer 0,
// `second` buffer 1 (the allreduce's peers read its input, then its output).
void publish(const detail::ArenaView& view, int rank, const void* first,
             const void* second = nullptr);

// Whether member `q` published the same address as both buffers.
bool publishedInPlace(const detail::ArenaView& view, int q);

// Copies `bytes` from offset `at` of member `q`'s published buffer `which` (0 or 1) to `to`;
// 0 or the errno.
int readRange(const detail::ArenaView& view, int q, int which, size_t at, void* to, size_t bytes);

// Threads this rank splits a read of `bytes` among (Note [Split single-copy reads]).
int readThreads(const Communicator& comm, size_t bytes);

// Reads `bytes[q]` from offset `from[q]` of each peer q's published buffer `which` to
// `out + to[q]`, split among threads; 0 or the errno of a failed read.
int readPeers(Communicator& comm, const detail::ArenaView& view, int which, unsigned char* out,
              const std::vector<size_t>& from, const std::vector<size_t>& to,
              const std::vector<size_t>& bytes);

// Whether every member may read a word of every other's published buffer `which`, agreed
// among them by a barrierMax once per communicator (for algorithms that overwrite what a
// fall-back would need once they start); false when all must fall back, with this member's
// failed read in *err.
bool agreed(Communicator& comm, const detail::ArenaView& view, int which, int* err);

// Throws InternalError for a read that failed on some member after they agreed that all could
// read (a peer is gone, or its buffer is not what it published): this member's errno `err`, or
// 0 when another member failed; `what` names the collective, `moved` what
// PERSEUS_SHM_SINGLE_COPY=0 moves through the slots instead.
[[noreturn]] void failedAfterAgreement(const Communicator& comm, int err, const char* what,
                                       const char* moved);

// Every member runs this when the members agreed to fall back: single-copy is not chosen on
// `comm` again, and `slots` runs the call. `err`: this member's failed read (0 when another
// member failed or this one refused), logged once per process.
void fallBack(Communicator& comm, const CollectiveArgs& args, const Algorithm& slots, int err);

}  // namespace perseus::collectives::single_copy
