// The cores a rank runs on: how many it may use, whether the host's ranks outnumber them, and
// (PERSEUS_BIND_TO=core) binding the rank to its own share of them.
//
// Note [Binding ranks to cores]
// Unbound, the scheduler moves a rank's threads between cores and at times puts two ranks on
// one core while the other idles: a rank that spins for its peer then holds the core the peer
// needs, and the op waits for a time slice. Binding cuts the time a small-op loop spends in
// such slow ops several-fold where the host keeps its cores apart (compare `perseusrun -np 2
// [--bind-to none] bench/engine_latency_bench`, counting the ops over a few µs); where it does
// not, it costs nothing. Open MPI's mpirun binds to cores by default for the same reason.
// perseusrun asks for binding (--bind-to,
// PERSEUS_BIND_TO=core); the rank binds itself at start-up, every thread it already has included (a
// framework's pools start before init), so remote ranks need nothing on their host.
#pragma once

#include <vector>

namespace perseus::transport::shm {

// Cores this process may run on (sched_getaffinity), at least 1.
int usableCpus();

// The cores that the `local_processes` ranks of this host share: this process's own when it is
// not bound (every rank of the host sees the same mask), its share times the ranks when it
// was bound to its share.
int sharedCpus(int local_processes);

// True when `local_processes` ranks share fewer cores than that. A waiter then yields its core
// on every idle pass, so that the rank it waits for (often runnable on the same core) runs
// now instead of after the spinner's time slice; with one core per rank, spinning through is
// cheaper than the syscall.
bool oversubscribed(int local_processes);

// Binds every thread of this process to local rank `local_rank`'s share of the cores it may
// run on: the CPUs in core order (coreOrder()) cut into `local_size` equal blocks, the
// remainder left unused. Returns the CPUs bound to; nothing (and no binding) when there are
// fewer CPUs than ranks or only one rank, or when the mask cannot be set.
std::vector<int> bindToShare(int local_rank, int local_size);

// Where a CPU sits: (package, die, core) as /sys/devices/system/cpu/cpuN/topology gives them.
struct CpuPlace {
  int package = 0, die = 0, core = 0;
};
// `cpus` ordered by package, die and core, then by id: hyperthread siblings (often numbered N
// apart, e.g. 3 and 3 + cores) end up side by side, so an even block never splits a core
// between ranks, and blocks stay within a package where they can. `place` is the machine's
// topology (sysfs when null; a CPU it cannot read sorts by its id alone).
std::vector<int> coreOrder(std::vector<int> cpus, CpuPlace (*place)(int cpu) = nullptr);

}  // namespace perseus::transport::shm
