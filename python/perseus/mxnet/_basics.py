"""Lifetime, topology, reduce ops and process sets for perseus.mxnet.

Takes perseus.common's implementation of each name when it has one (the shared adapter over
perseus._core); the small fallbacks below only keep this layer usable while that module grows,
and mirror Horovod 0.28 (horovod/common/basics.py, process_sets.py).
"""
import atexit
import threading

try:
    from perseus import common as _common
except ImportError:  # pragma: no cover - perseus.common always ships with perseus
    _common = None


def _core():
    from perseus import _core as core  # the native extension; loaded on first use
    return core


# Horovod's public reduce-op values (horovod.common.basics) -> perseus_reduce_op (c_api.h).
Average, Sum, Adasum, Min, Max, Product = 0, 1, 2, 3, 4, 5
_TO_CORE = {Average: 1, Sum: 0, Min: 2, Max: 3, Product: 4}


def core_op(op):
    """perseus_reduce_op of a Horovod reduce-op constant."""
    if op == Adasum:
        raise NotImplementedError("Adasum is not supported by perseus.mxnet (nor by "
                                  "horovod.mxnet); use Average or Sum")
    try:
        return _TO_CORE[op]
    except KeyError:
        raise ValueError("unknown reduce op %r; use Average, Sum, Min, Max or Product" % (op,))


_state_lock = threading.Lock()
_topology = None
_atexit_registered = False


def init(comm=None, process_sets=None):
    """Rendezvous with the other ranks (idempotent). ``comm`` must be None: the ranks come
    from perseusrun or mpirun. ``process_sets``: ProcessSet objects to register at once."""
    global _topology, _atexit_registered
    if comm is not None:
        raise ValueError("perseus.mxnet.init(comm=...) is not supported: start the job with "
                         "perseusrun or mpirun and use add_process_set for sub-groups")
    core = _core()
    core.init()
    with _state_lock:
        _topology = core.topology()
        register, _atexit_registered = not _atexit_registered, True
    if register:
        atexit.register(shutdown)
    for ps in process_sets or []:
        add_process_set(ps)


def shutdown():
    global _topology
    core = _core()
    if core.is_initialized():
        core.shutdown()
    with _state_lock:
        _topology = None


def is_initialized():
    try:
        return bool(_core().is_initialized())
    except ImportError:
        return False


def _topo(key):
    with _state_lock:
        t = _topology
    if t is None:
        if not is_initialized():
            raise ValueError("perseus.mxnet has not been initialized; call perseus.mxnet.init() "
                             "(or hvd.init()) first")
        t = _core().topology()
    return t[key]


def size():
    return _topo("size")


def rank():
    return _topo("rank")


def local_size():
    return _topo("local_size")


def local_rank():
    return _topo("local_rank")


def cross_size():
    return _topo("cross_size")


def cross_rank():
    return _topo("cross_rank")


def _build_flag(key):
    try:
        info = _core().build_info()
    except ImportError:
        return False
    for item in info.split():
        k, _, v = item.partition("=")
        if k == key:
            return v not in ("0", "")
    return False


def mpi_built():
    return _build_flag("mpi")


def mpi_enabled():
    return mpi_built()


def mpi_threads_supported():
    return False


def gloo_built():
    return True


def gloo_enabled():
    return True


def nccl_built():
    return 21000 if _build_flag("nccl") else 0


def cuda_built():
    return _build_flag("cuda")


def rocm_built():
    return False


def ddl_built():
    return False


def ccl_built():
    return False


class ProcessSet:
    """A group of ranks that collectives can run on (Horovod's ProcessSet)."""

    def __init__(self, ranks_or_comm):
        self.ranks = sorted(int(r) for r in ranks_or_comm) if ranks_or_comm is not None else None
        self.process_set_id = None

    def _invalidate(self):
        self.process_set_id = None

    def size(self):
        if self.process_set_id is None:
            return None
        return _core().process_set_info(self.process_set_id)[1]

    def rank(self):
        if self.process_set_id is None:
            return None
        return _core().process_set_info(self.process_set_id)[0]

    def included(self):
        r = self.rank()
        return None if r is None else r >= 0

    def __repr__(self):
        return "ProcessSet(process_set_id=%r, ranks=%r)" % (self.process_set_id, self.ranks)


class _GlobalProcessSet(ProcessSet):
    def __init__(self):
        super().__init__(None)
        self.process_set_id = 0


global_process_set = _GlobalProcessSet()


def add_process_set(process_set):
    """Registers a process set on every rank (collective); returns the ProcessSet."""
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    if process_set.process_set_id is not None:
        raise ValueError("%r is already registered" % (process_set,))
    process_set.process_set_id = _core().add_process_set(process_set.ranks)
    return process_set


def remove_process_set(process_set):
    """Unregisters a process set (collective). Returns True if it was removed."""
    if process_set.process_set_id in (None, 0):
        return False
    _core().remove_process_set(process_set.process_set_id)
    process_set._invalidate()
    return True


def process_set_id(process_set):
    """The C API id of a ProcessSet, an int id, or None (the global set)."""
    if process_set is None:
        return 0
    if isinstance(process_set, int):
        return process_set
    pid = getattr(process_set, "process_set_id", None)
    if pid is None:
        raise ValueError("%r is not registered; call add_process_set first" % (process_set,))
    return pid


# Prefer the shared adapter's implementations where perseus.common provides them.
if _common is not None:
    for _name in ("init", "shutdown", "is_initialized", "size", "rank", "local_size",
                  "local_rank", "cross_size", "cross_rank", "ProcessSet", "global_process_set",
                  "add_process_set", "remove_process_set"):
        if hasattr(_common, _name):
            globals()[_name] = getattr(_common, _name)
    del _name
