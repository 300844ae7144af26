"""Framework-neutral layer: the adapter over the `_core` extension that the torch and mxnet
layers share (basics, process sets, reduce ops, names, object collectives, exceptions).
Importing it loads neither a framework nor the native extension.

It is also where init() meets elastic mode: basics.init() starts the core through a join hook,
and this package installs the elastic worker's join there, so that basics, which the worker
builds on, never imports the worker."""

from perseus.common import basics as _basics
from perseus.common.basics import (  # noqa: F401
    ccl_built, core, cross_rank, cross_size, cuda_built, ddl_built, gloo_built, gloo_enabled,
    init, is_homogeneous, is_initialized, local_rank, local_size, mpi_built, mpi_enabled,
    mpi_threads_supported, nccl_built, rank, rocm_built, shutdown, size, start_timeline,
    stop_timeline)
from perseus.common.elastic import worker as _elastic_worker
from perseus.common.exceptions import HorovodInternalError, PerseusInternalError  # noqa: F401
from perseus.common.names import op_name  # noqa: F401
from perseus.common.ops import Adasum, Average, Max, Min, Product, Sum  # noqa: F401
from perseus.common.process_sets import (  # noqa: F401
    ProcessSet, add_process_set, global_process_set, process_set_id, remove_process_set)

_basics.set_join_hook(_elastic_worker.join)
