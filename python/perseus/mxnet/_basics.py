"""Lifetime, topology, reduce ops and process sets for perseus.mxnet: perseus.common's, plus the
two helpers the MXNet layer needs (the core op of a Horovod constant, a set's size)."""
from perseus.common import basics as _b
from perseus.common import ops as _ops
from perseus.common.basics import (  # noqa: F401
    ccl_built, cross_rank, cross_size, cuda_built, ddl_built, gloo_built, gloo_enabled, init,
    is_initialized, local_rank, local_size, mpi_built, mpi_enabled, mpi_threads_supported,
    nccl_built, rank, rocm_built, shutdown, size, start_timeline, stop_timeline)
from perseus.common.names import op_name  # noqa: F401
from perseus.common.ops import Adasum, Average, Max, Min, Product, Sum, resolve_op  # noqa: F401
from perseus.common.process_sets import (  # noqa: F401
    ProcessSet, add_process_set, global_process_set, process_set_id, remove_process_set)

_core = _b.core


def core_op(op):
    """perseus_reduce_op of a Horovod reduce-op constant (Adasum: UnsupportedError)."""
    return _ops.to_core_op(op)


def set_size(process_set):
    """Ranks in `process_set` (the global set, a ProcessSet or a C API id such as LOCAL)."""
    pid = process_set_id(process_set)
    if pid == 0:
        return size()
    return _core().process_set_info(pid)[1]
