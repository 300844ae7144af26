"""perseus.torch: Horovod 0.28's horovod.torch API on Perseus.

    import perseus.torch as hvd
    hvd.init()
    torch.manual_seed(...)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)

Beyond Horovod: bfloat16 and bool tensors; non-contiguous tensors are made contiguous (a
copy); dtypes the core lacks (int16, complex...) are reduced with a clear error and moved as
bytes by allgather/broadcast/alltoall. See docs/torch.md."""

from perseus.common.basics import (  # noqa: F401
    ccl_built, cross_rank, cross_size, cuda_built, ddl_built, engine_stats, gloo_built,
    gloo_enabled, init,
    is_homogeneous, is_initialized, local_rank, local_size, mpi_built, mpi_enabled,
    mpi_threads_supported, nccl_built, rank, rocm_built, shutdown, size, start_timeline,
    stop_timeline)
from perseus.common.exceptions import (  # noqa: F401
    HorovodInternalError, HostsUpdatedInterrupt, PerseusInternalError)
from perseus.common.ops import Adasum, Average, Max, Min, Product, Sum  # noqa: F401
from perseus.common.process_sets import (  # noqa: F401
    ProcessSet, add_process_set, global_process_set, remove_process_set)
from perseus.torch.autograd_ops import (  # noqa: F401
    allgather, allreduce, allreduce_, alltoall, broadcast, broadcast_, grouped_allgather,
    grouped_allreduce, grouped_allreduce_, grouped_reducescatter, reducescatter)
from perseus.torch.compression import Compression  # noqa: F401
from perseus.torch.functions import (  # noqa: F401
    allgather_object, broadcast_object, broadcast_optimizer_state, broadcast_parameters)
from perseus.torch.mpi_ops import (  # noqa: F401
    allgather_async, allreduce_async, allreduce_async_, alltoall_async, barrier,
    broadcast_async, broadcast_async_, grouped_allgather_async, grouped_allreduce_async,
    grouped_allreduce_async_, grouped_reducescatter_async, join, poll, reducescatter_async,
    sparse_allreduce_async, synchronize)
from perseus.torch import elastic  # noqa: F401
from perseus.torch.optimizer import DistributedOptimizer  # noqa: F401
from perseus.torch.sync_batch_norm import SyncBatchNorm  # noqa: F401
import torch.distributed as _dist  # noqa: E402

if _dist.is_available():
    from perseus.torch import distributed  # noqa: F401  (registers the "perseus" backend)
