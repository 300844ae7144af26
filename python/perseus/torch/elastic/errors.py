"""hvd.elastic.run for torch: a failed collective of the torch.distributed backend "perseus"
counts as the PerseusInternalError it stands for.

Where a DDP or FSDP collective fails, torch's C++ (the reducer, a Future's .then() chain)
re-raises the backend's error as a RuntimeError carrying only its text, so the run loop
recognises it by that text: the backend's Work errors read "perseus: <op> on process group
'<name>' failed on rank <r> ...". Anything else goes through unchanged.
"""
import re

from perseus.common.elastic import worker as elastic_worker
from perseus.common.elastic.state import run_loop
from perseus.common.exceptions import PerseusInternalError

_BACKEND_FAILURE = re.compile(r"perseus: \w+ on process group '[^']*' failed on rank \d+")


def perseus_error(e):
    """The PerseusInternalError behind `e` (a torch.distributed failure of the perseus
    backend), else `e` itself."""
    cause = e
    while cause is not None:
        if isinstance(cause, PerseusInternalError):
            return cause
        cause = cause.__cause__ or cause.__context__
    if isinstance(e, RuntimeError) and _BACKEND_FAILURE.search(str(e)):
        return PerseusInternalError(str(e))
    return e


def run_fn(func, reset=None):
    """perseus.common.elastic.state.run_fn, with the perseus backend's failures understood."""
    return run_loop(func, reset or elastic_worker.reset, perseus_error)


def run(func):
    """Decorator for elastic training: `hvd.elastic.run(train)(state, *args)` (see
    perseus.common.elastic.state.run); also for training loops of torch.distributed on the perseus
    backend (DDP, FSDP2)."""
    return run_fn(func)
