"""dist.shrink_group on the perseus backend: the survivors of the default group go on as a new,
smaller Perseus job, in the same processes.

Note [Shrinking]: torch's shrink_group runs on the ranks that stay only (the ones left out may
be dead, or alive and simply not taking part), and asks the group's backend for a new backend
of the remaining ranks (Backend.shrink). The default perseus group is the engine's whole job,
so each survivor stops its engine at once, with no barrier that would wait for the ranks left
out, and the survivors form a new job (new rank: the index among the remaining ranks, in
order) through the store the first one used: torch's store under a fresh key, or perseusrun's
under a prefix of its own. A rank left out that is still alive sees its pending collectives
fail ("rank N called shutdown()") and must not use the group again.
- The store must outlive the ranks left out: with tcp:// or env:// it lives in rank 0's process
  (leave rank 0 in), under torchrun in its agent, under perseusrun in the launcher.
- Pending work of the old group fails (the old job stops) with SHRINK_DEFAULT as with
  SHRINK_ABORT: a Perseus job cannot lose ranks and keep its collectives in flight.
- A subgroup cannot shrink: its process set is one of the job's, and sets are made by every
  rank of the job (Note [Groups as process sets]), while only the subgroup's survivors call
  shrink_group. torch destroys every other group when the default group shrinks; make
  subgroups again with new_group after it.
- Under perseusrun's elastic mode the launcher re-forms the job on its own (hvd.elastic.run),
  so shrink_group is refused there.
- torch registers the new backend as Gloo's, for one device (the group's bound device, else
  the CPU); code that trusts that type (DDP's logger) would treat it as a ProcessGroupGloo and
  crash. install() registers it as the custom backend it is, for each device the old group
  had perseus for."""

import functools
import inspect
import socket

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
from torch._C._distributed_c10d import ProcessGroup

from perseus.common.elastic import worker as elastic_worker
from perseus.torch.distributed import _engine, _groups


def _refuse(backend):
    if not backend.is_default_group:
        raise dist.DistBackendError(
            "perseus: shrink_group of a subgroup (process group '%s') is not supported: its "
            "Perseus process set would have to be made again by every rank of the job, while "
            "only its survivors call shrink_group; shrink the default group "
            "(dist.shrink_group(ranks)), or call dist.new_group(remaining ranks) on every rank"
            % backend.group_label)
    if elastic_worker.enabled():
        raise dist.DistBackendError(
            "perseus: shrink_group under perseusrun's elastic mode: the launcher re-forms the "
            "job itself; run the training in hvd.elastic.run and rebuild the process group in "
            "a reset callback (python/perseus/examples/torch_distributed/elastic_ddp.py)")


def shrink(backend, excluded, flags, opts=None):
    """Backend.shrink of the default perseus group: stops this process's engine, forms the job
    of the ranks not in `excluded` (group ranks, sorted) and returns the new default group's
    backend, of the same class as `backend`. `flags` (SHRINK_DEFAULT or SHRINK_ABORT): pending
    work fails either way (Note [Shrinking])."""
    _refuse(backend)
    gone = set(int(r) for r in excluded)
    remaining = [r for r in range(backend.size()) if r not in gone]
    if backend.rank() not in remaining:
        raise dist.DistBackendError(
            "perseus: rank %d is among the ranks to exclude %s and must not call shrink_group"
            % (backend.rank(), sorted(gone)))
    rank, size = remaining.index(backend.rank()), len(remaining)
    timeout_s = _engine.options_seconds(opts, backend.timeout_s)
    _groups.forget()
    # torch's store names the old rank 0's host; a new rank 0 that was not it names its own.
    host = None if remaining[0] == 0 else socket.gethostname()
    try:
        _engine.restart(backend._store, rank, size, timeout_s, host)
    except Exception as e:  # noqa: BLE001 (re-raised as the type torch documents)
        raise dist.DistBackendError(
            "perseus: shrink_group: the %d remaining ranks %s could not form a new job: %s; "
            "every remaining rank must call shrink_group with the same ranks to exclude, and "
            "torch's store must still be reachable (it lives in rank 0's process under tcp:// "
            "and env://)" % (size, remaining, e)) from e
    new = type(backend)(rank, size, range(size), 0, "%s:shrunk" % backend.group_label,
                        timeout_s, backend._store)
    new.is_default_group = True
    return new


def _perseus_devices(backend_config):
    """The devices of a backend string ("cpu:perseus,cuda:perseus") that perseus serves."""
    devices = []
    for part in str(backend_config).split(","):
        device, _, name = part.rpartition(":")
        if device and name.strip().lower() == "perseus":
            devices.append(device.strip())
    return devices


def install():
    """Wraps torch's _create_shrunk_process_group once (Note [Shrinking])."""
    original = getattr(c10d, "_create_shrunk_process_group", None)
    if original is None or getattr(original, "_perseus_wrapped", False):
        return
    signature = inspect.signature(original)

    @functools.wraps(original)
    def create(*args, **kwargs):
        pg = original(*args, **kwargs)
        bound = signature.bind(*args, **kwargs).arguments
        backend = bound.get("new_backend")
        if getattr(backend, "getBackendName", lambda: "")() != "perseus":
            return pg
        custom = ProcessGroup.BackendType.CUSTOM
        config = (bound.get("metadata") or {}).get("backend_config", "")
        for device in _perseus_devices(config) or ["cpu"]:
            pg._register_backend(torch.device(device), custom, backend)
        pg._set_default_backend(custom)
        return pg

    create._perseus_wrapped = True
    c10d._create_shrunk_process_group = create
