// The MPI data plane (PERSEUS_CPU_OPERATIONS=mpi): one Channel per peer over MPI point-to-point
// messages, for jobs started by mpirun. ChannelTransport drives them like shm or TCP channels,
// so every collective runs unchanged over MPI.
//
// Note [MPI byte streams]
// A Channel is a byte stream; MPI moves messages. Each channel owns bounce buffers: trySend
// copies up to kChunkBytes into a free send buffer and starts MPI_Isend (so the caller's buffer
// is free as soon as trySend returns, as the Channel contract requires); the receiver keeps
// kRecvDepth MPI_Irecv of kChunkBytes pre-posted and serves the stream from them in posting
// order (MPI matches messages of one source, tag and communicator in order, so the byte order
// is kept whatever the two sides' call sizes). Progress happens in MPI_Test, called from
// trySend/tryRecv/hasIncoming, which ChannelTransport calls while it waits.
//
// Threads: MPI is initialised with MPI_THREAD_MULTIPLE when Perseus initialises it (at least
// MPI_THREAD_SERIALIZED is required); only the engine thread calls the channels, bootstrap and
// shutdown run on the thread that initialises Perseus. If Perseus initialised MPI, destroying
// the last channel finalises it (mpirun reports a process that exits without MPI_Finalize as
// failed); MPI cannot be initialised twice in a process, so such a process can start Perseus
// with the MPI data plane only once. If the application initialised MPI, it finalises it.
#pragma once

#include <memory>
#include <vector>

#include "common/params.h"
#include "transport/channel.h"

namespace perseus::transport::mpi {

// True when this build has the MPI data plane (PERSEUS_HAVE_MPI).
bool built();

// Initialises MPI if needed, checks that MPI_COMM_WORLD's rank and size are `rank` and `size`
// (the topology mpirun gave), and returns a channel to every other rank (null at `rank`).
// Throws InvalidArgumentError when the build has no MPI, MismatchError when MPI's ranks do not
// match the topology, UnsupportedError when MPI lacks MPI_THREAD_SERIALIZED.
std::vector<std::unique_ptr<Channel>> connectMpiPeers(int rank, int size, const Params& params);

}  // namespace perseus::transport::mpi
