"""Where a bench rank runs: bound to its own share of the host's cores, as perseusrun binds every
rank by default (PERSEUS_BIND_TO=core, Note [Binding ranks to cores] in
src/transport/shm/cpu_budget.h), or left to the scheduler.

ddp.py and fsdp.py bind the ranks of every backend alike (--bind-to), so that their rows and
the `hvd` row, which perseusrun starts, run under the same placement. Unbound, a rank's
communication threads (Gloo's, Perseus's engine) take turns with the other rank's compute
thread on any core, and on a host with as many cores as ranks the figures then follow the
scheduler more than the backend.

    placement.bind(rank, ranks, backend)   # first thing in the rank's process
"""
import os


def _place(cpu):
    """(package, die, core) of a CPU from sysfs, as coreOrder() reads them."""
    base = "/sys/devices/system/cpu/cpu%d/topology/" % cpu
    out = []
    for field in ("physical_package_id", "die_id", "core_id"):
        try:
            with open(base + field) as f:
                out.append(int(f.read()))
        except (OSError, ValueError):
            out.append(0)
    return tuple(out)


def share(rank, ranks):
    """The CPUs of `rank`'s share: the CPUs this process may use, in core order (hyperthread
    siblings side by side), cut into `ranks` equal blocks; empty when ranks outnumber them."""
    cpus = sorted(os.sched_getaffinity(0), key=lambda c: (_place(c), c))
    per = len(cpus) // ranks
    return set(cpus[rank * per:(rank + 1) * per]) if per else set()


def bind(rank, ranks, backend):
    """Binds every thread of this process to `rank`'s share; returns the CPUs (empty: not
    bound, as perseusrun leaves ranks that outnumber the cores). Backend perseus binds itself
    to the same share when the job forms (PERSEUS_BIND_TO=core, what perseusrun sets): its
    engine then knows that each rank has cores of its own, where a rank bound from outside
    looks to it like ranks crowding onto one share, whose waiters yield their core on every
    idle pass."""
    cpus = share(rank, ranks)
    if backend == "perseus":
        os.environ["PERSEUS_BIND_TO"] = "core"
        return cpus
    if not cpus:
        return cpus
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except OSError:  # a thread that ended meanwhile
            pass
    return cpus


def add_argument(parser):
    parser.add_argument("--bind-to", choices=("core", "none"), default="core",
                        help="core: each rank on its own share of the cores, as perseusrun "
                             "places the hvd row (default); none: the scheduler places them")
