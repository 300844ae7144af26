// The collectives the engine runs, over one Communicator, on host memory. Each entry point
// picks an algorithm (see collectives/registry.h and docs/algorithms.md): the cheapest one
// whose supports() accepts the call, unless PERSEUS_ALLREDUCE_ALGO names one.
//
// All calls are blocking and collective: every member calls the same function with matching
// arguments (the engine's negotiation guarantees it). Errors are the transport's exceptions.
// Buffers may alias where noted. Counts are elements, sizes are bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "collectives/communicator.h"
#include "common/dtype.h"

namespace perseus::collectives {

// out[i] = postscale * (op over ranks of in[i]). in == out is allowed. op is never kAverage
// here: the engine turns Average into Sum with a postscale. float16/bfloat16 reduce in
// float32. The shared-memory algorithm scales each reduced chunk while it is still in L1
// (Note [Scaled shm allreduce]); the others scale the result afterwards, with the same bits.
// op kAdasum runs Horovod's Adasum over the whole of `in` as one tensor (Note [Adasum]); it
// throws UnsupportedError unless the size is a power of two and dtype a floating-point type.
void allreduce(Communicator& comm, const void* in, void* out, size_t count, DataType dtype,
               ReduceOp op, double postscale = 1.0);

// Concatenates each rank's `bytes[r]` bytes in rank order into out (sum of bytes).
void allgatherv(Communicator& comm, const void* in, void* out, const std::vector<size_t>& bytes);

// Root's buffer reaches every rank. `root` is a communicator rank.
void broadcast(Communicator& comm, void* data, size_t bytes, int root);

// Rank r sends send_bytes[p] bytes (consecutive in `in`, in peer order) to each peer p and
// receives recv_bytes[p] bytes from each, concatenated in peer order into `out`.
void alltoallv(Communicator& comm, const void* in, const std::vector<size_t>& send_bytes, void* out,
               const std::vector<size_t>& recv_bytes);

// Reduces `in` (sum of counts elements) and leaves block r (counts[r] elements, blocks in rank
// order), multiplied by `postscale`, on rank r in `out`.
void reducescatterv(Communicator& comm, const void* in, void* out,
                    const std::vector<size_t>& counts, DataType dtype, ReduceOp op,
                    double postscale = 1.0);

// Root receives every rank's bytes[r] concatenated in rank order (out is ignored elsewhere).
void gatherv(Communicator& comm, const void* in, void* out, const std::vector<size_t>& bytes,
             int root);

void barrier(Communicator& comm);

// Note [Reused group ids]
// A communicator's group id names its barrier counters and small-message lines in the arena,
// which carry the history of the group's earlier members: each member's count of barriers
// and its lines' sequence numbers. Before a removed set's group id is given to a new member
// list, every local rank of the host calls this in the same place, over `host` (a
// communicator of all of them, whose own group is another): they agree on the largest count
// and sequence number, and each continues from those. Counters and sequence numbers only
// grow, so a peer still leaving an old barrier of the group is not disturbed.
void reuseGroup(Communicator& host, int group_id);

// Single-copy broadcasts and allgathers (single_copy_shm.cc) that this process ran through the
// slots instead, because some member could not or would not read a peer's memory.
uint64_t singleCopyFallbacks();

}  // namespace perseus::collectives
