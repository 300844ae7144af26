"""Which class a perseus group is (Note [ProcessGroup route] in _process_group.py): a c10d
Backend where torch lets Python build one, else (or after prefer_process_group()) a
ProcessGroup; and what that route cannot serve."""

import torch
from torch._C._distributed_c10d import Backend as _C10dBackend


def python_backends_supported():
    """Whether this torch lets a Python class derive from c10d's Backend: torch releases whose
    binding of Backend has no Python constructor refuse to build one ("No constructor
    defined"); there each perseus group is a PerseusProcessGroup instead."""
    global _PYTHON_BACKENDS
    if _PYTHON_BACKENDS is None:
        class _Probe(_C10dBackend):
            pass
        try:
            _Probe(0, 1)
            _PYTHON_BACKENDS = True
        except TypeError:
            _PYTHON_BACKENDS = False
    return _PYTHON_BACKENDS


_PYTHON_BACKENDS = None


def prefer_process_group(prefer=True):
    """Makes the perseus groups created from now on ProcessGroup subclasses on any torch (Note
    [ProcessGroup route] in _process_group.py): torch.distributed's Python then calls the
    group's methods directly, without c10d's dispatcher and Work holder, which costs less per
    call, at the price of that route's limits (no mixed backend strings, no split_group).
    prefer=False goes back to the default."""
    global _PREFER_PROCESS_GROUP
    _PREFER_PROCESS_GROUP = bool(prefer)


_PREFER_PROCESS_GROUP = False


def process_group_route():
    """Whether perseus groups are ProcessGroup subclasses here."""
    return _PREFER_PROCESS_GROUP or not python_backends_supported()


def refuse_mixed(backend):
    """A mixed backend string ("cpu:gloo,cuda:perseus") needs perseus as one device's backend,
    which the ProcessGroup route cannot be (Note [ProcessGroup route])."""
    spec = str(backend).lower()
    if ":" not in spec or not process_group_route():
        return
    others = [d for d in spec.split(",") if d.split(":")[-1].strip() != "perseus"]
    if others:
        raise ValueError(
            "perseus: backend %r mixes perseus with other backends, which needs perseus groups "
            "that are c10d Backends (torch %s cannot build them from Python, or "
            "prefer_process_group() was called); use backend='perseus' for every device"
            % (str(backend), torch.__version__))
