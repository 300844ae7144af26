"""Lifetime, topology, reduce ops and process sets for perseus.mxnet: perseus.common's, plus the
two helpers the MXNet layer needs (the core op of a Horovod constant, a set's size)."""
import atexit
import threading

from perseus.common import basics as _b
from perseus.common import ops as _ops
from perseus.common.basics import (  # noqa: F401
    ccl_built, cross_rank, cross_size, cuda_built, ddl_built, engine_stats, gloo_built,
    gloo_enabled,
    is_initialized, local_rank, local_size, mpi_built, mpi_enabled, mpi_threads_supported,
    nccl_built, rank, rocm_built, shutdown, size, start_timeline, stop_timeline)
from perseus.common.exceptions import UnsupportedError
from perseus.common.names import op_name  # noqa: F401
from perseus.common.ops import Adasum, Average, Max, Min, Product, Sum, resolve_op  # noqa: F401
from perseus.common.process_sets import (  # noqa: F401
    ProcessSet, add_process_set, global_process_set, process_set_id, remove_process_set, set_root)

_core = _b.core


def core_op(op):
    """perseus_reduce_op of a Horovod reduce-op constant. Adasum is refused, as in Horovod's
    MXNet layer (perseus.torch has it)."""
    if op == Adasum:
        raise UnsupportedError("op=Adasum is not supported by horovod.mxnet nor perseus.mxnet; "
                               "use op=Average or op=Sum (perseus.torch has Adasum)")
    return _ops.to_core_op(op)


def set_size(process_set):
    """Ranks in `process_set` (the global set, a ProcessSet or a C API id such as LOCAL)."""
    pid = process_set_id(process_set)
    if pid == 0:
        return size()
    return _core().process_set_info(pid)[1]


_drain_lock = threading.Lock()
_drain_registered = False


def _drain_mxnet():
    # Runs before perseus.common's atexit shutdown (atexit is LIFO and this is registered
    # after it): MXNet work still queued at exit (a backward nobody waited for, a push) gets to
    # finish its collectives instead of failing against a shut-down Perseus; bounded by
    # PERSEUS_TIMEOUT when the peers are gone.
    import mxnet as mx
    try:
        mx.nd.waitall()
    except Exception:  # noqa: BLE001 - the error was the program's; exit anyway
        pass


def init(comm=None, process_sets=None):
    """perseus.common's init, plus draining MXNet's queue at exit before Perseus shuts down."""
    global _drain_registered
    _b.init(comm=comm, process_sets=process_sets)
    with _drain_lock:
        register, _drain_registered = not _drain_registered, True
    if register:
        atexit.register(_drain_mxnet)
