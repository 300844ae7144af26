"""perseus.torch.distributed: the torch.distributed backend "perseus".

    import perseus.torch            # registers the backend (or: import perseus.torch.distributed)
    import torch.distributed as dist
    dist.init_process_group("perseus")   # torchrun, perseusrun; init_method="perseus://" under
                                         # mpirun or srun; tcp://, env:// and store= work too

Every collective runs on the Perseus engine: the default group is the engine's job, other groups
are process sets of it. See docs/torch-distributed.md."""


import torch.distributed as dist

from perseus.torch.distributed import _engine, _groups, _rendezvous, _shrink
from perseus.torch.distributed._backend import PerseusBackend
from perseus.torch.distributed._process_group import PerseusProcessGroup
from perseus.torch.distributed._route import (  # noqa: F401
    prefer_process_group, process_group_route, python_backends_supported)
from perseus.torch.distributed._work import PerseusWork

__all__ = ["PerseusBackend", "PerseusProcessGroup", "PerseusWork", "BACKEND_NAME",
           "python_backends_supported", "process_group_route", "prefer_process_group"]

BACKEND_NAME = "perseus"


def _group_class():
    """The class of a perseus group: a c10d Backend where torch lets Python build one, unless
    prefer_process_group() was called, else a ProcessGroup."""
    return PerseusProcessGroup if process_group_route() else PerseusBackend


def _create(opts, backend_options=None):
    """The creator torch calls for each perseus group this rank belongs to (extended API)."""
    group_class = _group_class()
    rank, size = opts.group_rank, opts.group_size
    timeout_s = _engine.seconds(opts.timeout, 1800.0)
    ranks = list(opts.global_ranks_in_group)
    if not ranks:  # the default group: the engine's job
        _engine.start(opts.store, rank, size, timeout_s)
        backend = group_class(rank, size, range(size), 0, opts.group_id, timeout_s, opts.store)
        backend.is_default_group = True
        return backend
    if ranks != sorted(ranks):
        raise ValueError("perseus: the group's ranks %s are not in ascending order; Perseus "
                         "process sets order ranks as the job does (new_group sorts them "
                         "unless sort_ranks=False)" % (ranks,))
    ps = _groups.known_set(ranks)
    if ps is None:
        raise dist.DistBackendError(
            "perseus: no process set was made for the group of ranks %s; every rank of the job "
            "must create each perseus group (new_group without use_local_synchronization=True)"
            % (ranks,))
    return group_class(rank, size, ranks, ps, opts.group_id, timeout_s, opts.store)


def _register():
    if not hasattr(dist.Backend, BACKEND_NAME.upper()):
        dist.Backend.register_backend(BACKEND_NAME, _create, extended_api=True,
                                      devices=["cpu", "cuda"])
    _groups.install()
    _rendezvous.install()
    _shrink.install()


if dist.is_available():
    _register()
