"""Work objects of the perseus backend: one submitted Perseus collective seen through torch's
c10d Work (wait, get_future, result, exception).

Note [is_completed]: torch hands the caller of a Python backend's collective its own holder
of the Work (PyWorkHolder), which forwards wait() and get_future() to the Python object but
answers is_completed() from its C++ base, which nothing completes. So the Work a torch.distributed
call returns says is_completed() False until torch changes that; work.get_future().done() is
the poll that works. PerseusWork.is_completed() itself is right for code that holds it, which
the caller does on the ProcessGroup route (Note [ProcessGroup route] in _process_group.py).

Note [Work completion]: the output a caller sees may need a step after the engine finished
(a copy back into a non-contiguous tensor, the library's allgather output copied into the
caller's tensor). That step, `finish`, runs once, on whichever thread first needs it: the
caller's wait(), or the thread that completes get_future()'s Future. Futures are completed on a
small pool of threads, never on the engine's callback thread, because DDP comm hooks (PowerSGD)
wait for other collectives inside their .then() callbacks, and set_result runs those callbacks
inline: one thread completing every Future would wait for itself.

Note [CUDA futures]: a CUDA op's Future completes once the collective is on its stream, as
NCCL's does, not when the GPU has run it: the completing thread makes its current stream wait
on the collective (which waits on the host only until the engine has launched it), and
Future.set_result records that stream's event, which the consumer's wait() and then() order
their streams after. DDP's reducer waits for its buckets' futures at the end of backward; a
Future completed by the GPU's completion would drain the GPU there in every step, and the host
could not run ahead into the next step. A failure the GPU reports after the launch surfaces in
the next collective, as with NCCL."""

import concurrent.futures
import threading

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import Work

from perseus.common.exceptions import PerseusInternalError, UnsupportedError
from perseus.torch import _tensors as _t
from perseus.torch.distributed import _engine

_finish_lock = threading.Lock()
_pool = None
_pool_lock = threading.Lock()


def _completion_pool():
    global _pool
    if _pool is None:
        with _pool_lock:
            if _pool is None:
                _pool = concurrent.futures.ThreadPoolExecutor(
                    max_workers=32, thread_name_prefix="perseus-future")
    return _pool


class PerseusWork(Work):
    """A submitted collective. `handle`: the core handle (None: completed at submission);
    `outputs`: the tensors get_future() and result() give; `finish`: run once after the
    engine completed (Note [Work completion]); `device`: the CUDA device or None.

    Slots, not a __dict__: a Work is made per submitted collective, and slots halve the cost
    of setting its fields."""

    __slots__ = ("_backend", "_op", "_h", "_outputs", "_finish", "_device", "_future", "_base",
                 "_error")

    def __init__(self, backend, op, handle, outputs, finish=None, device=None):
        Work.__init__(self)
        self._backend = backend
        self._op = op
        self._h = handle
        self._outputs = outputs
        self._finish = finish
        self._device = device
        self._future = None
        self._error = None

    # -- completion ----------------------------------------------------------------------

    def _fail(self, exc):
        b = self._backend
        err = dist.DistBackendError(
            "perseus: %s on process group '%s' failed on rank %d (group rank %d of %d): %s"
            % (self._op, b.group_label, b.global_rank, b.rank(), b.size(), exc))
        self._error = err
        return err

    def _complete(self, timeout_s):
        """Waits for the engine (on the host for CPU ops; by the current stream for CUDA ops),
        then runs `finish` once. Raises DistBackendError."""
        if self._error is not None:
            raise self._error
        h = self._h
        if h is not None:
            try:
                if self._device is not None:
                    h.cuda_stream_wait(_t.current_stream_ptr(self._device))
                elif not h.wait(timeout_s * 1.25 + 5):  # the engine's stall error comes first
                    raise self._fail(
                        "it did not complete within %.0f s (the group's timeout); a rank did "
                        "not call it, or called a different collective" % timeout_s) from None
            except UnsupportedError:
                h.wait(timeout_s)
            except PerseusInternalError as e:
                raise self._fail(e) from e
        if self._finish is not None:
            with _finish_lock:
                finish, self._finish = self._finish, None
            if finish is not None:
                finish()

    def wait(self, timeout=None):
        if self._h is not None or self._finish is not None or self._error is not None:
            self._complete(_engine.seconds(timeout, self._backend.timeout_s))
        return True

    def block_current_stream(self):
        self._complete(self._backend.timeout_s)

    def is_completed(self):
        h = self._h
        return h is None or h.done

    def is_success(self):
        return self.is_completed() and self._error is None and (
            self._h is None or self._h.status == 0)

    def exception(self):
        return self._error

    def result(self):
        self.wait()
        return self._outputs

    def source_rank(self):
        raise dist.DistBackendError("perseus: source_rank() is only meaningful for a recv from "
                                    "any source, which the perseus backend does not offer")

    def synchronize(self):
        self.wait()

    # -- futures ---------------------------------------------------------------------------

    def get_future(self):
        fut = self._future
        if fut is not None:
            return fut
        devices = [self._device] if self._device is not None else None
        base = torch.futures.Future(devices=devices) if devices else torch.futures.Future()
        self._base = base
        # Note [Failed futures]: Future.set_exception stores the exception as the value, and
        # DDP's reducer reads a value as a tensor list (a crash, not an error). A failure is
        # set as a _Failed value that a .then() callback raises, so the returned Future
        # carries a real error that wait() and DDP raise.
        fut = base.then(_unwrap)
        self._future = fut
        h = self._h
        if h is None and self._finish is not None:
            _completion_pool().submit(self._settle)  # a recv: its finish waits for the message
        elif h is None or h.done:
            self._settle()
        elif self._device is not None:
            _completion_pool().submit(self._settle)  # Note [CUDA futures]
        else:
            h.set_callback(self._on_engine_done)
        return fut

    def _on_engine_done(self, _status):
        try:
            _completion_pool().submit(self._settle)
        except RuntimeError:  # the interpreter is exiting: no new threads
            self._settle()

    def _settle(self):
        base = self._base
        try:
            self._complete(self._backend.timeout_s)
        except Exception as e:  # noqa: BLE001 (delivered through the Future)
            base.set_result(_Failed(e))
            return
        base.set_result(_flat(self._outputs))


class _Failed:
    """A failed operation's error, carried as a Future's value (Note [Failed futures])."""

    def __init__(self, error):
        self.error = error


def _unwrap(base):
    value = base.value()
    if isinstance(value, _Failed):
        raise value.error
    return value


def _flat(outputs):
    out = []
    for o in outputs:
        if isinstance(o, (list, tuple)):
            out.extend(o)
        else:
            out.append(o)
    return out


def done_work(backend, op, outputs):
    """A Work for an operation that needed no communication."""
    return PerseusWork(backend, op, None, outputs)


def shutdown_pool():
    global _pool
    with _pool_lock:
        pool, _pool = _pool, None
    if pool is not None:
        pool.shutdown(wait=False)
