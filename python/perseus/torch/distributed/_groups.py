"""torch process groups -> Perseus process sets.

Note [Groups as process sets]: a Perseus process set is made by every rank of the job, in the
same order (perseus_add_process_set), but torch calls a backend's creator only on the members
of a new group. So `install()` wraps torch's `_new_process_group_helper`, which every rank
runs for new_group/new_subgroups/DeviceMesh (unless use_local_synchronization=True): there
every rank makes the set of a perseus group before torch creates the group, and the creator
finds it by its ranks. Groups with the same ranks share one set; the world group is set 0.
split_group reaches Backend.split on every rank of the parent instead (see PerseusBackend)."""

import functools
import inspect
import threading

import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from perseus.common import basics
from perseus.torch.distributed import _route

_lock = threading.Lock()
_sets = {}  # tuple of sorted global ranks -> process set id


def uses_perseus(backend):
    return backend is not None and "perseus" in str(backend).lower()


def set_for(ranks):
    """The process set of `ranks` (global), made now if needed: a collective over the job."""
    key = tuple(sorted(int(r) for r in ranks))
    if len(key) == basics.size():
        return 0
    with _lock:
        pid = _sets.get(key)
    if pid is None:
        pid = basics.core().add_process_set(list(key))
        with _lock:
            _sets[key] = pid
    return pid


def known_set(ranks):
    """The set made for `ranks` by set_for on every rank, or None."""
    key = tuple(sorted(int(r) for r in ranks))
    if len(key) == basics.size():
        return 0
    with _lock:
        return _sets.get(key)


def forget():
    """At engine shutdown every set ends."""
    with _lock:
        _sets.clear()


def _existing_tagged(pg_tag, ranks):
    if pg_tag in (None, ""):
        return False
    find = getattr(c10d, "_find_pg_by_ranks_and_tag", None)
    return find is not None and find(pg_tag, ranks) is not None


def _before_new_group(ranks, backend, pg_tag, timeout):
    """Runs on every rank that creates a group (members and not), before torch does."""
    from perseus.torch.distributed import _engine
    if not uses_perseus(backend):
        return
    _route.refuse_mixed(backend)
    if not ranks or _existing_tagged(pg_tag, ranks):
        return
    if not basics.is_initialized():  # the default group uses another backend
        store = c10d._get_default_store()
        _engine.start(store, dist.get_rank(), dist.get_world_size(),
                      timeout.total_seconds() if timeout else 1800.0)
    set_for(ranks)


def _refuse_local_synchronization():
    """new_group(use_local_synchronization=True) runs on the members only, so the set could
    never be made: say so at once instead of failing at the group's timeout."""
    original = getattr(c10d, "new_group", None)
    if original is None or getattr(original, "_perseus_wrapped", False):
        return

    @functools.wraps(original)
    def new_group(*args, **kwargs):
        if kwargs.get("use_local_synchronization"):
            backend = kwargs.get("backend")
            if backend is None and c10d.is_initialized():
                backend = c10d.get_backend_config()
            if uses_perseus(backend):
                raise ValueError(
                    "perseus: new_group(use_local_synchronization=True) is not supported: every "
                    "rank of the job makes each Perseus process set, so call new_group on every "
                    "rank without use_local_synchronization")
        return original(*args, **kwargs)

    new_group._perseus_wrapped = True
    c10d.new_group = new_group
    dist.new_group = new_group


def install():
    """Wraps torch's group creation helper once (Note [Groups as process sets])."""
    _refuse_local_synchronization()
    original = getattr(c10d, "_new_process_group_helper", None)
    if original is None or getattr(original, "_perseus_wrapped", False):
        return
    signature = inspect.signature(original)

    @functools.wraps(original)
    def helper(*args, **kwargs):
        try:
            bound = signature.bind(*args, **kwargs).arguments
        except TypeError:
            bound = {}
        _before_new_group(bound.get("global_ranks_in_group"), bound.get("backend"),
                          bound.get("pg_tag"), bound.get("timeout"))
        return original(*args, **kwargs)

    helper._perseus_wrapped = True
    c10d._new_process_group_helper = helper
