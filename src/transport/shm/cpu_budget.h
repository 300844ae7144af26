// Whether the processes of this host outnumber the cores they may run on.
#pragma once

namespace perseus::transport::shm {

// Cores this process may run on (sched_getaffinity), at least 1.
int usableCpus();

// True when `local_processes` ranks share fewer cores than that. A waiter then yields its core
// on every idle pass, so that the rank it waits for (often runnable on the same core) runs
// now instead of after the spinner's time slice; with one core per rank, spinning through is
// cheaper than the syscall.
bool oversubscribed(int local_processes);

}  // namespace perseus::transport::shm
