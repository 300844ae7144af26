"""perseus.mxnet: Horovod-compatible (``import perseus.mxnet as hvd``) and KVStore-compatible
(``perseus.mxnet.create('dist_sync_perseus')``) distributed training for MXNet.

Importing this module registers the 'dist_sync_perseus' KVStore types with mx.kv.create and
PerseusSyncBatchNorm in mx.gluon.contrib.nn, mx.sym.contrib and mx.nd.contrib. See
docs/mxnet.md.
"""
import mxnet as _mx  # noqa: F401  (fail early with MXNet's own message if it is missing)

from . import _basics
from ._basics import (  # noqa: F401
    Average, Sum, Adasum, Min, Max, Product,
    init as _init, shutdown, is_initialized, size, rank, local_size, local_rank, cross_size,
    cross_rank, mpi_built, mpi_enabled, mpi_threads_supported, gloo_built, gloo_enabled,
    nccl_built, cuda_built, rocm_built, ddl_built, ccl_built, engine_stats, start_timeline,
    stop_timeline,
    ProcessSet, global_process_set, add_process_set, remove_process_set,
)
from .mpi_ops import (  # noqa: F401
    allreduce, allreduce_, grouped_allreduce, grouped_allreduce_, allgather, grouped_allgather,
    broadcast, broadcast_, alltoall, reducescatter, grouped_reducescatter, barrier, join,
    Handle, allreduce_async, allreduce_async_, grouped_allreduce_async_, broadcast_async_, poll,
    synchronize,
)
from .functions import broadcast_parameters, broadcast_object, allgather_object  # noqa: F401
from .compression import Compression  # noqa: F401
from .trainer import DistributedOptimizer, DistributedTrainer  # noqa: F401
from .kvstore import PerseusKVStore, PerseusOp, create  # noqa: F401
from . import kvstore as _kvstore
from . import sync_batch_norm as _sync_batch_norm
from .sync_batch_norm import PerseusSyncBatchNorm  # noqa: F401
from . import elastic  # noqa: F401  (hvd.elastic, as in horovod.torch)
from ._fatal_signals import restore_default_crash as _restore_default_crash

try:
    from perseus.common.exceptions import PerseusInternalError, HorovodInternalError  # noqa
except ImportError:  # pragma: no cover
    pass


def _sync_bn_allreduce(scope):
    """Blocking allreduce of SyncBatchNorm statistics over this host (0) or all ranks (1)."""
    process_set = -1 if scope == _sync_batch_norm.SCOPE_LOCAL else 0  # PERSEUS_PROCESS_SET_*

    def allreduce(name, vector):
        out = allreduce_(vector, op=Sum, name=name, process_set=process_set)
        out.wait_to_read()
        return out
    return allreduce


def init(comm=None, process_sets=None):
    """Starts Perseus: rendezvous with the other ranks (idempotent)."""
    _init(comm=comm, process_sets=process_sets)


_restore_default_crash()  # Note [MXNet's segfault logger]
_kvstore._register()
_sync_batch_norm.register()
# Ready once Perseus is initialised, by init() or by creating a Perseus KVStore.
_sync_batch_norm.set_allreduce_provider(_sync_bn_allreduce, ready=is_initialized)
