"""Lifetime and topology (Horovod's horovod/common/basics.py over perseus._core).

Thread safety: init/shutdown from one thread (as in Horovod); the getters from any."""

import atexit
import threading

from perseus.common.exceptions import NotInitializedError

_lock = threading.Lock()
_topology = None
_atexit_registered = False
_NOT_INITIALIZED = "Perseus has not been initialized; use hvd.init()."


_core_module = None


def core():
    """The native extension, loaded on first use so `import perseus` stays cheap. Cached: every
    collective calls this, and a function-level import costs about a microsecond each time."""
    global _core_module
    if _core_module is None:
        from perseus import _core
        _core_module = _core
    return _core_module


def init(comm=None, process_sets=None):
    """Rendezvous with every rank (started by perseusrun or mpirun) and start the engine.
    Idempotent. comm: None, or the list of all ranks (sub-communicators are process sets in
    Perseus). process_sets: ProcessSet objects to register now, or "dynamic" (always on)."""
    global _topology, _atexit_registered
    c = core()
    c.init()
    with _lock:
        _topology = c.topology()
        if not _atexit_registered:
            atexit.register(_at_exit)
            _atexit_registered = True
    if comm is not None and sorted(int(r) for r in comm) != list(range(_topology["size"])):
        raise ValueError("init(comm=%r): Perseus always initializes every rank of the job; use "
                         "add_process_set(%r) for collectives on a subset" % (comm, comm))
    if process_sets is not None and not isinstance(process_sets, str):
        from perseus.common.process_sets import add_process_set
        for ps in process_sets:
            add_process_set(ps)


def _at_exit():
    shutdown()
    core()._stop_callbacks()


def shutdown():
    """Stops the engine; pending operations fail with ShutDownError. Safe to call twice."""
    global _topology
    with _lock:
        _topology = None
    try:
        c = core()
    except ImportError:
        return
    if c.is_initialized():
        c.shutdown()
    from perseus.common.process_sets import _forget_all
    _forget_all()


def is_initialized():
    try:
        return bool(core().is_initialized())
    except ImportError:
        return False


def topology():
    """dict of rank, size, local_rank, local_size, cross_rank, cross_size."""
    with _lock:
        t = _topology
    if t is None:
        raise NotInitializedError(_NOT_INITIALIZED)
    return t


def rank():
    return topology()["rank"]


def size():
    return topology()["size"]


def local_rank():
    return topology()["local_rank"]


def local_size():
    return topology()["local_size"]


def cross_rank():
    return topology()["cross_rank"]


def cross_size():
    return topology()["cross_size"]


def is_homogeneous():
    """True: perseusrun fills every host with the same slot count in practice."""
    return size() == local_size() * cross_size()


def build_flags():
    """perseus_build_info() as a dict, e.g. {'cpu': '1', 'cuda': '0', ...}."""
    return dict(item.split("=", 1) for item in core().build_info().split() if "=" in item)


def _flag(key):
    try:
        return build_flags().get(key, "0") not in ("0", "")
    except ImportError:
        return False


def mpi_built():
    return _flag("mpi")


def mpi_enabled():
    return mpi_built()


def mpi_threads_supported():
    return False


def gloo_built():
    """Perseus's own CPU data plane stands in for Gloo."""
    return True


def gloo_enabled():
    return True


def nccl_built():
    """Horovod returns NCCL_VERSION_CODE or 0; Perseus reports the build-info value."""
    try:
        value = build_flags().get("nccl", "0")
    except ImportError:
        return 0
    return int(value) if value.isdigit() else 1


def cuda_built():
    return _flag("cuda")


def rocm_built():
    return False


def ddl_built():
    return False


def ccl_built():
    return False


def engine_stats():
    """This rank's engine counters since init() (a Perseus extension, not in Horovod): cycles,
    control_exchanges and control_bytes (the one AND per process set and cycle that negotiates
    cached tensors), coordinator_rounds (negotiations of new names through the set's
    coordinator), cached_responses, coordinated_responses and negotiation_ns (time spent
    negotiating), posted_allreduces and posted_collectives (small allreduces, and small
    collectives of every kind, that skipped negotiation: Note [Posted collectives]). Differences between two calls give the cost of the steps in between."""
    return core().engine_stats()


def start_timeline(file_path, mark_cycles=False):
    raise NotImplementedError("start_timeline: Perseus has no runtime timeline switch yet; set "
                              "PERSEUS_TIMELINE=%s (perseusrun --timeline-filename) before "
                              "starting the job" % file_path)


def stop_timeline():
    raise NotImplementedError("stop_timeline: the timeline runs for the whole job when "
                              "PERSEUS_TIMELINE is set")
