"""Horovod 0.28 horovod.mxnet collectives over Perseus, ordered by MXNet's dependency engine.

allreduce/broadcast (and their in-place and grouped forms) are pushed into MXNet's engine
(engine.py): they return at once, start when the ops producing their inputs are done, and the
ops reading their outputs wait for them; a failure surfaces as MXNetError at ``wait_to_read``,
``asnumpy`` or ``mx.nd.waitall()``. Collectives whose output shape is known only after the
ranks have talked (allgather, alltoall, reducescatter) block, as in Horovod.

Names: every rank must submit the same name for the same collective. Unnamed collectives get
``<kind>.noname.<n>``, which matches across ranks only if every rank issues the same unnamed
collectives in the same order (as in Horovod).
"""
import copy
import threading

import mxnet as mx
import numpy as np

from . import _basics
from ._basics import Average, Sum, Adasum, Min, Max, Product, global_process_set  # noqa: F401
from .engine import bridge
from perseus.common.exceptions import (PerseusInternalError, UnsupportedError,
                                       exception_for_status)


def _name(kind, name, process_set=None):
    return _basics.op_name(kind, name, _basics.process_set_id(process_set))


def _reduce_op(average, op):
    return _basics.resolve_op(op, average)


def _core():
    return _basics._core()


_failure_lock = threading.Lock()
_first_failure = None  # of the collectives pushed into MXNet's engine: collective_failure()


def _failure(handle):
    """The exception a failed handle raises (a PerseusInternalError or one of its kinds)."""
    try:
        handle.wait(0.0)
    except Exception as e:  # noqa: BLE001 - the library's own exception carries the cause
        return e
    return exception_for_status(handle.status)("failed with status %d" % handle.status)


def collective_failure():
    """The exception of the first collective pushed into MXNet's engine that failed (or could
    not be submitted) since forget_failures(), or None. MXNet's engine hands a failure on to
    the arrays as text only (an MXNetError raised where they are read), so the elastic layer
    asks here which Perseus failure such an error stands for. (A blocking collective raises
    its MXNetError from the Perseus exception itself.)"""
    with _failure_lock:
        return _first_failure


def forget_failures():
    """Drops the recorded failure (one of a membership that was left)."""
    global _first_failure
    with _failure_lock:
        _first_failure = None


def _record_failure(error):
    global _first_failure
    with _failure_lock:
        if _first_failure is None:
            _first_failure = _without_frames(error)


def _without_frames(error):
    """A copy of `error` with no traceback or chained exceptions: a failure kept for later must
    not keep the frames that raised it alive, with the arrays and capsules they hold. Kept to
    interpreter exit, those would be freed after MXNet's engine has shut down, and crash it."""
    try:
        return copy.copy(error)
    except Exception:  # noqa: BLE001 - an exception type that cannot be rebuilt from its args
        return error.with_traceback(None)


def _on_done(handle, what, done):
    """Completes the engine op when the Perseus handle completes (callback thread, GIL). A
    failure is recorded before MXNet hears of it, so whoever reads the poisoned arrays finds it
    in collective_failure()."""
    def callback(status):
        if status == 0:
            done(None)
            return
        error = _failure(handle)
        _record_failure(error)
        done("%s: %s (%s)" % (what, error, type(error).__name__))
    handle.set_callback(callback)


def _push(kind, name, inputs, outputs, priority, submit, after=()):
    """Pushes one collective; submit(in_capsules, out_capsules_or_None) -> _core handle."""
    in_place = [a.handle.value for a in inputs] == [a.handle.value for a in outputs]

    def start(in_views, out_views, done):
        in_caps = [v.take_capsule() for v in in_views]
        out_caps = None if in_place else [v.take_capsule() for v in out_views]
        try:
            handle = submit(in_caps, out_caps)
        except PerseusInternalError as e:  # the engine fails the op: its readers raise
            _record_failure(e)
            raise
        _on_done(handle, "%s %r" % (kind, name), done)

    return bridge().push(start, inputs, outputs, priority=priority, name="%s.%s" % (kind, name),
                         after=after)


_NDArray = mx.nd.NDArray


def _check_tensor(tensor, what):
    if type(tensor) is _NDArray:  # dense: sparse arrays are NDArray subclasses; skips a C call
        return
    if not isinstance(tensor, mx.nd.NDArray):
        raise ValueError("%s expects an mx.nd.NDArray, got %s" % (what, type(tensor).__name__))
    if tensor.stype != "default":
        raise ValueError("%s supports dense NDArrays only (got stype %r); convert with "
                         "tostype('default')" % (what, tensor.stype))


def _allreduce_async(inputs, outputs, name, op, prescale, postscale, process_set, priority,
                     grouped, after=()):
    core_op = _basics.core_op(op)
    ps = _basics.process_set_id(process_set)
    core = _core()
    if grouped:
        def submit(ins, outs):
            return core.grouped_allreduce(name, ins, outs, core_op, float(prescale),
                                          float(postscale), ps)
    else:
        def submit(ins, outs):
            return core.allreduce(name, ins[0], None if outs is None else outs[0], core_op,
                                  float(prescale), float(postscale), ps)
    return _push("allreduce", name, inputs, outputs, priority, submit, after)


def allreduce(tensor, average=None, name=None, priority=0, prescale_factor=1.0,
              postscale_factor=1.0, process_set=global_process_set, op=None):
    """Reduces `tensor` over the ranks of `process_set` into a new NDArray (Average by default).
    Returns at once; the result is ready when MXNet's engine says so."""
    _check_tensor(tensor, "allreduce")
    op = _reduce_op(average, op)
    output = mx.nd.zeros(tensor.shape, ctx=tensor.context, dtype=tensor.dtype)
    _allreduce_async([tensor], [output], _name("allreduce", name, process_set), op,
                     prescale_factor, postscale_factor, process_set, priority, grouped=False)
    return output


def allreduce_(tensor, average=None, name=None, priority=0, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set, op=None):
    """In-place allreduce; returns `tensor`."""
    _check_tensor(tensor, "allreduce_")
    op = _reduce_op(average, op)
    _allreduce_async([tensor], [tensor], _name("allreduce", name, process_set), op,
                     prescale_factor, postscale_factor, process_set, priority, grouped=False)
    return tensor


def grouped_allreduce(tensors, average=None, name=None, priority=0, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=global_process_set, op=None):
    """Allreduce of a list, negotiated and completed as one unit; returns new NDArrays."""
    for t in tensors:
        _check_tensor(t, "grouped_allreduce")
    op = _reduce_op(average, op)
    outputs = [mx.nd.zeros(t.shape, ctx=t.context, dtype=t.dtype) for t in tensors]
    if tensors:
        _allreduce_async(list(tensors), outputs,
                         _name("grouped_allreduce", name, process_set), op, prescale_factor,
                         postscale_factor, process_set, priority, grouped=True)
    return outputs


def grouped_allreduce_(tensors, average=None, name=None, priority=0, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set, op=None):
    """In-place grouped allreduce; returns `tensors`."""
    for t in tensors:
        _check_tensor(t, "grouped_allreduce_")
    op = _reduce_op(average, op)
    if tensors:
        _allreduce_async(list(tensors), list(tensors),
                         _name("grouped_allreduce", name, process_set), op, prescale_factor,
                         postscale_factor, process_set, priority, grouped=True)
    return tensors


def _broadcast_async(tensor, output, root_rank, name, priority, process_set, after=()):
    ps = _basics.process_set_id(process_set)
    root = _basics.set_root(ps, root_rank)  # root_rank is a rank of the whole job
    core = _core()

    def submit(ins, outs):
        return core.broadcast(name, ins[0], None if outs is None else outs[0], root, ps)
    return _push("broadcast", name, [tensor], [output], priority, submit, after)


def broadcast(tensor, root_rank, name=None, priority=0, process_set=global_process_set):
    """`root_rank`'s tensor, into a new NDArray on every rank."""
    _check_tensor(tensor, "broadcast")
    output = mx.nd.zeros(tensor.shape, ctx=tensor.context, dtype=tensor.dtype)
    _broadcast_async(tensor, output, root_rank, _name("broadcast", name, process_set), priority,
                     process_set)
    return output


def broadcast_(tensor, root_rank, name=None, priority=0, process_set=global_process_set):
    """In-place broadcast from `root_rank`; returns `tensor`."""
    _check_tensor(tensor, "broadcast_")
    _broadcast_async(tensor, tensor, root_rank, _name("broadcast", name, process_set), priority,
                     process_set)
    return tensor


# --- blocking collectives (the output shape comes from the other ranks) --------------------
def _capsule(tensor):
    return tensor.to_dlpack_for_read()  # waits for the producers of `tensor`


def _submit_blocking(submit, tensors):
    """submit(capsules) -> _core handle. MXNet's capsule destructor runs Python code, which
    fails and clears the pending error (SystemError: error return without exception set) if
    it runs while a submission error propagates; so the capsules stay referenced here and are
    released inside the handler."""
    caps = [_capsule(t) for t in tensors]
    try:
        return submit(caps)
    except BaseException:
        del caps
        raise


def _to_ndarray(handle, index, like):
    out = handle.output(index, False) if like.context.device_type == "cpu" else None
    if out is not None and isinstance(out, np.ndarray):
        return mx.nd.array(out, ctx=like.context, dtype=like.dtype)
    cap = handle.output(index, True)
    return mx.nd.from_dlpack(cap).copyto(like.context)


def _wait(handle, what):
    try:
        handle.wait(-1.0)
    except Exception as e:
        raise mx.base.MXNetError("%s: %s" % (what, e)) from e


def allgather(tensor, name=None, priority=0, process_set=global_process_set):
    """Concatenation along dim 0 of every rank's tensor (dim 0 may differ). Blocks."""
    _check_tensor(tensor, "allgather")
    name = _name("allgather", name, process_set)
    h = _submit_blocking(lambda caps: _core().allgather(
        name, caps[0], _basics.process_set_id(process_set)), [tensor])
    _wait(h, "allgather %r" % name)
    return _to_ndarray(h, 0, tensor)


def grouped_allgather(tensors, name=None, priority=0, process_set=global_process_set):
    """allgather of a list as one unit. Blocks."""
    for t in tensors:
        _check_tensor(t, "grouped_allgather")
    if not tensors:
        return []
    name = _name("grouped_allgather", name, process_set)
    h = _submit_blocking(lambda caps: _core().grouped_allgather(
        name, caps, _basics.process_set_id(process_set)), tensors)
    _wait(h, "grouped_allgather %r" % name)
    return [_to_ndarray(h, i, t) for i, t in enumerate(tensors)]


def _split_list(splits, name):
    """alltoall's splits as ints. As Horovod, an array must hold 32-bit integers (a float32
    NDArray is a ValueError, not silently truncated), a list Python integers."""
    if isinstance(splits, mx.nd.NDArray):
        splits = splits.asnumpy()
    if isinstance(splits, np.ndarray):
        if splits.dtype != np.int32:
            raise ValueError("alltoall %r: splits must be int32, got %s; use "
                             "splits.astype('int32')" % (name, splits.dtype))
        return [int(s) for s in splits.reshape(-1)]
    values = list(splits)
    if not all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) for s in values):
        raise ValueError("alltoall %r: splits must be integers, got %r" % (name, values))
    return [int(s) for s in values]


def alltoall(tensor, splits=None, name=None, priority=0, process_set=global_process_set):
    """Sends splits[i] rows of dim 0 to rank i. Returns the output, or (output, received_splits)
    when `splits` is given. Blocks."""
    _check_tensor(tensor, "alltoall")
    name = _name("alltoall", name, process_set)
    split_list = None if splits is None else _split_list(splits, name)
    h = _submit_blocking(lambda caps: _core().alltoall(
        name, caps[0], split_list, _basics.process_set_id(process_set)), [tensor])
    _wait(h, "alltoall %r" % name)
    output = _to_ndarray(h, 0, tensor)
    if splits is None:
        return output
    return output, mx.nd.array(h.received_splits(), dtype="int32")


def reducescatter(tensor, op=Average, name=None, priority=0, process_set=global_process_set,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Reduces, then gives rank i the i-th block of dim 0. Blocks."""
    _check_tensor(tensor, "reducescatter")
    if op not in (Average, Sum):  # Horovod's core refuses the others (HorovodInternalError)
        raise UnsupportedError("reducescatter supports op=Average or op=Sum only")
    if len(tensor.shape) == 0:
        raise ValueError("reducescatter needs a tensor with at least one dimension")
    name = _name("reducescatter", name, process_set)
    h = _submit_blocking(lambda caps: _core().reducescatter(
        name, caps[0], _basics.core_op(op), float(prescale_factor), float(postscale_factor),
        _basics.process_set_id(process_set)), [tensor])
    _wait(h, "reducescatter %r" % name)
    return _to_ndarray(h, 0, tensor)


def grouped_reducescatter(tensors, op=Average, name=None, priority=0,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    """reducescatter of a list as one unit. Blocks."""
    if op not in (Average, Sum):
        raise UnsupportedError("grouped_reducescatter supports op=Average or op=Sum only")
    for t in tensors:
        _check_tensor(t, "grouped_reducescatter")
        if len(t.shape) == 0:
            raise ValueError("grouped_reducescatter needs tensors with at least one dimension")
    if not tensors:
        return []
    name = _name("grouped_reducescatter", name, process_set)
    h = _submit_blocking(lambda caps: _core().grouped_reducescatter(
        name, caps, _basics.core_op(op), float(prescale_factor), float(postscale_factor),
        _basics.process_set_id(process_set)), tensors)
    _wait(h, "grouped_reducescatter %r" % name)
    return [_to_ndarray(h, i, t) for i, t in enumerate(tensors)]


def barrier(process_set=global_process_set):
    """Blocks until every rank of the set reached it (waits for this rank's pending MXNet work
    first, so that it really marks a point in the program)."""
    mx.nd.waitall()
    h = _core().barrier(_basics.process_set_id(process_set))
    _wait(h, "barrier")


def join():
    """This rank has no more work; returns the last rank to join once all have."""
    mx.nd.waitall()
    h = _core().join()
    _wait(h, "join")
    return h.join_rank()


# --- explicit handles (as perseus.torch / horovod.torch) ------------------------------------
class Handle:
    """An asynchronous collective: ``poll(h)`` tells whether it finished, ``synchronize(h)``
    waits and returns its output (raising its error as MXNetError). The output NDArray can also
    be used at once: MXNet's engine orders its readers after the collective."""
    __slots__ = ("_op", "output")

    def __init__(self, op, output):
        self._op, self.output = op, output


def allreduce_async(tensor, average=None, name=None, priority=0, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set, op=None):
    _check_tensor(tensor, "allreduce_async")
    op = _reduce_op(average, op)
    output = mx.nd.zeros(tensor.shape, ctx=tensor.context, dtype=tensor.dtype)
    pending = _allreduce_async([tensor], [output], _name("allreduce", name, process_set), op,
                               prescale_factor, postscale_factor, process_set, priority,
                               grouped=False)
    return Handle(pending, output)


def allreduce_async_(tensor, average=None, name=None, priority=0, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set, op=None):
    _check_tensor(tensor, "allreduce_async_")
    op = _reduce_op(average, op)
    pending = _allreduce_async([tensor], [tensor], _name("allreduce", name, process_set), op,
                               prescale_factor, postscale_factor, process_set, priority,
                               grouped=False)
    return Handle(pending, tensor)


def grouped_allreduce_async_(tensors, average=None, name=None, priority=0, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set, op=None):
    for t in tensors:
        _check_tensor(t, "grouped_allreduce_async_")
    op = _reduce_op(average, op)
    pending = _allreduce_async(list(tensors), list(tensors),
                               _name("grouped_allreduce", name, process_set), op,
                               prescale_factor, postscale_factor, process_set, priority,
                               grouped=True)
    return Handle(pending, tensors)


def broadcast_async_(tensor, root_rank, name=None, priority=0, process_set=global_process_set):
    _check_tensor(tensor, "broadcast_async_")
    pending = _broadcast_async(tensor, tensor, root_rank, _name("broadcast", name, process_set),
                               priority, process_set)
    return Handle(pending, tensor)


def poll(handle):
    """True once the collective behind `handle` has finished (successfully or not)."""
    return handle._op.done_event.is_set()


def synchronize(handle, timeout=None):
    """Waits for `handle`; returns its output; raises its failure as MXNetError."""
    handle._op.wait(timeout)
    return handle.output
