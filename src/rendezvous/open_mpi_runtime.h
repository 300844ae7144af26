// Open MPI's libmpi, loaded at run time for one broadcast at start-up: the ranks of a bare
// multi-host `mpirun` share the rendezvous store's address this way, whether or not the
// library was built with MPI's headers (a plain `pip install .` may not find them).
#pragma once

#include <string>

namespace perseus::rendezvous {

// Initialises MPI unless the application did, broadcasts `message` from rank 0 (the others'
// argument is ignored) and returns it on every rank; finalises MPI again when it initialised
// it and `keep_mpi` is false (mpirun reports a process that exits without MPI_Finalize as
// failed). Throws InvalidArgumentError saying how to make it work when libmpi cannot be
// loaded, InternalError when an MPI call fails.
std::string openMpiBroadcast(const std::string& message, bool keep_mpi);

}  // namespace perseus::rendezvous
