// Single-copy reads from a local peer's memory: Linux cross-memory attach (process_vm_readv).
// The kernel copies straight from the peer's pages into ours: one pass over the data where
// staging through a shared-memory slot takes two (into the slot, out of it). Allowed between
// processes of one user unless the system forbids it (Yama's ptrace_scope, seccomp); callers
// agree on a failure with their peers and take another path (collectives/single_copy_shm.cc).
#pragma once

#include <sys/types.h>

#include <cstddef>

namespace perseus::transport::shm {

// Copies `bytes` from address `remote` of process `pid` to `local`. Returns 0, or the errno of
// the call that failed (EPERM where the system forbids it, ESRCH once the process is gone,
// EFAULT for an address the peer does not map).
int readPeerMemory(pid_t pid, const void* remote, void* local, size_t bytes);

}  // namespace perseus::transport::shm
