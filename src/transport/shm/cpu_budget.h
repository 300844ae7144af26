// The cores a rank runs on: how many it may use, whether the host's ranks outnumber them, and
// (PERSEUS_BIND_TO=core) binding the rank to its own share of them.
//
// Note [Binding ranks to cores]
// Unbound, the scheduler moves a rank's threads between cores and at times puts two ranks on
// one core while the other idles: a rank that spins for its peer then holds the core the peer
// needs, and the op waits for a time slice. Binding cuts the time a small-op loop spends in
// such slow ops several-fold where the host keeps its cores apart (compare `perseusrun -np 2
// [--bind-to none] bench/engine_latency_bench`, counting the ops over a few µs); where it does
// not, it costs nothing. Open MPI's mpirun binds by default for the same reason (to cores up
// to 2 ranks, to packages beyond). perseusrun asks for binding (--bind-to,
// PERSEUS_BIND_TO=core); the rank binds itself at start-up, every thread it already has included (a
// framework's pools start before init), so remote ranks need nothing on their host.
//
// Whoever bound the ranks (Perseus, mpirun --bind-to core, srun --cpu-bind=cores, taskset or
// numactl per rank, a container's cpuset), a rank sees only its own mask, which says nothing of
// whether its peers share those CPUs. So each local rank publishes its mask in its
// shared-memory segment (shm_layout.h), and every rank of the host decides from all of them
// (hostCpus()): ranks with a CPU each spin while they wait, ranks that must share one yield it.
#pragma once

#include <vector>

namespace perseus::transport::shm {

// Cores this process may run on (sched_getaffinity), at least 1.
int usableCpus();

// The CPUs this thread may run on (sched_getaffinity), ascending; none when the mask cannot be
// read.
std::vector<int> allowedCpus();

// What the local ranks of a host make of their masks (Note [Binding ranks to cores]).
struct HostCpus {
  // The CPUs that any of them may run on, at least 1. The ranks' reduce threads split these.
  int cpus = 1;
  // True when the ranks cannot each have a CPU of their own: fewer CPUs than ranks in all, or
  // some ranks bound to fewer CPUs than there are of them (two ranks bound to one CPU). A
  // waiter then yields its core on every idle pass, so that the rank it waits for (often
  // runnable on the same core) runs now instead of after the spinner's time slice; with a CPU
  // per rank, spinning through is cheaper than the syscall.
  bool oversubscribed = false;
};

// HostCpus from each local rank's allowed CPUs (`masks[lr]`, as allowedCpus() read them). A
// mask that could not be read (empty) counts as the union of the others.
HostCpus hostCpus(std::vector<std::vector<int>> masks);

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
