"""Error cases raise (never hang) and leave the job usable. Run on 2 ranks."""

import copy
import inspect
import os
import pickle
import pydoc
import signal
import threading
import time

import torch

import perseus.torch as hvd
from perseus.common.basics import core as perseus_core
from perseus.common.exceptions import (DuplicateNameError, MismatchError, PerseusInternalError,
                                       UnsupportedError)


def expect(exc, fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except exc as e:
        return e
    raise AssertionError("%s did not raise %s" % (fn.__name__, exc.__name__))


def interrupted_waits(rank):
    # A late call of a posted name (hvd.allgather and hvd.allreduce make their result after
    # posting) waits in slices: Ctrl-C interrupts it. The peer's later call completes it.
    for _ in range(3):
        hvd.allgather(torch.ones(1), name="int.ag")
        hvd.allreduce(torch.ones(1), name="int.ar")
    for fn, name in ((hvd.allgather, "int.ag"), (hvd.allreduce, "int.ar")):
        if rank == 1:
            time.sleep(1.0)
            fn(torch.ones(1), name=name)
            continue
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()
        start = time.monotonic()
        expect(KeyboardInterrupt, fn, torch.ones(1), name=name)
        assert time.monotonic() - start < 0.8, time.monotonic() - start
    out = hvd.allreduce(torch.ones(2), name="int.after", op=hvd.Sum)
    assert torch.equal(out, torch.full((2,), 2.0)), out


def main():
    e = expect(ValueError, hvd.rank)
    assert "not been initialized" in str(e)
    expect(ValueError, hvd.size)
    hvd.init()
    rank = hvd.rank()

    # Mismatched shapes: every rank gets the error (RuntimeError as in Horovod, also ValueError).
    e = expect(RuntimeError, hvd.allreduce, torch.ones(2 + rank), name="bad.shape")
    assert isinstance(e, MismatchError) and isinstance(e, PerseusInternalError), type(e)
    assert isinstance(e, ValueError)
    assert "bad.shape" in str(e), str(e)
    # An unnamed blocking call has its kind's name (perseus.common.names), which the error
    # names; the name is used again right after.
    e = expect(MismatchError, hvd.allreduce_, torch.ones(2 + rank))
    assert "allreduce.noname" in str(e), str(e)
    t = torch.ones(2)
    assert hvd.allreduce_(t, op=hvd.Sum).eq(hvd.size()).all(), t
    # Mismatched dtypes and ops
    expect(MismatchError, hvd.allreduce,
           torch.ones(2, dtype=torch.float32 if rank == 0 else torch.float64), name="bad.dtype")
    expect(MismatchError, hvd.allreduce, torch.ones(2), name="bad.op",
           op=hvd.Sum if rank == 0 else hvd.Max)
    expect(MismatchError, hvd.broadcast, torch.ones(2), rank, name="bad.root")
    expect(MismatchError, hvd.allgather, torch.ones(2, 2 + rank), name="bad.gather")
    # The same through the blocking in-place calls (CPU tensors go to the core by address).
    e = expect(MismatchError, hvd.allreduce_, torch.ones(2 + rank), name="bad.shape_")
    assert "bad.shape_" in str(e), str(e)
    e = expect(MismatchError, hvd.allreduce_, torch.ones(2, 3) if rank else torch.ones(3, 2),
               name="bad.shape2d_")
    assert "bad.shape2d_" in str(e), str(e)
    expect(MismatchError, hvd.allreduce_,
           torch.ones(2, dtype=torch.float32 if rank == 0 else torch.float64), name="bad.dtype_")
    e = expect(MismatchError, hvd.broadcast_, torch.ones(2), rank, name="bad.root_")
    assert "bad.root_" in str(e), str(e)
    # The allgather of a small CPU tensor (one call into the core, the result copied out) too,
    # also once its name has a posted slot.
    e = expect(MismatchError, hvd.allgather, torch.ones(2, 2 + rank), name="bad.gather_")
    assert "bad.gather_" in str(e), str(e)
    e = expect(MismatchError, hvd.allgather,
               torch.ones(2, dtype=torch.float32 if rank == 0 else torch.float64),
               name="bad.gather_dtype")
    assert "bad.gather_dtype" in str(e), str(e)
    for _ in range(3):
        hvd.allgather(torch.ones(2, 3), name="gather.posted")
    e = expect(MismatchError, hvd.allgather, torch.ones(2, 3 + rank), name="gather.posted")
    assert "gather.posted" in str(e), str(e)
    # The extension call behind it checks its own arguments; a result it cannot place fails
    # after the collective completed (every rank took part), and the job goes on.
    core = perseus_core()
    expect(TypeError, core.allgather_into, "bad.args")
    t = torch.ones(2)
    expect(TypeError, core.allgather_into, "bad.alloc", t.data_ptr(), 6, t.shape, 0,
           lambda shape, dtype: None, t.dtype)

    # Duplicate name in flight: ValueError at submission, like Horovod. The first op must still
    # be in flight when the second comes: rank 0 joins it only after the barrier (and the
    # other ranks join rank 0's own after the next one), else it may have completed already.
    t = torch.ones(4)
    handles = []
    for first in (rank != 0, rank == 0):
        if first:
            handles.append(hvd.allreduce_async(t, name="dup.%d" % len(handles)))
            expect(DuplicateNameError, hvd.allreduce_async, t, name="dup.%d" % (len(handles) - 1))
        hvd.barrier()
        if not first:
            handles.append(hvd.allreduce_async(t, name="dup.%d" % len(handles)))
    assert isinstance(DuplicateNameError("x"), ValueError)
    for h in handles:
        hvd.synchronize(h)

    # Unsupported dtypes and ops are ValueErrors, raised before any communication.
    expect(UnsupportedError, hvd.allreduce, torch.ones(2, dtype=torch.complex64))
    expect(UnsupportedError, hvd.allreduce, torch.ones(2, dtype=torch.int16))
    expect(UnsupportedError, hvd.allreduce, torch.ones(2, dtype=torch.int32), op=hvd.Adasum)
    expect(ValueError, hvd.allreduce, torch.ones(2), average=True, op=hvd.Sum)
    expect(ValueError, hvd.synchronize, 123456)
    expect(ValueError, hvd.broadcast, torch.ones(2), 5, name="bad.rootrange")
    unregistered = hvd.ProcessSet([0])
    expect(ValueError, hvd.allreduce, torch.ones(2), process_set=unregistered)
    expect(ValueError, hvd.allreduce_, torch.ones(2), process_set=unregistered)
    # Adasum takes the asynchronous path, which refuses integer tensors as for hvd.allreduce.
    expect(UnsupportedError, hvd.allreduce_, torch.ones(2, dtype=torch.int32), op=hvd.Adasum)
    expect(ValueError, hvd.allreduce_, torch.ones(2), op=[hvd.Sum])
    expect(ValueError, hvd.broadcast_, torch.ones(2), 5, name="bad.rootrange_")
    expect(UnsupportedError, hvd.allreduce_, torch.ones(2, dtype=torch.int16))

    # A call Python would refuse is refused alike by the C functions that these are
    # (mpi_ops.fast_entry): unknown or repeated arguments, too many, a missing one.
    t = torch.ones(2)
    for fn, args, kwargs in ((hvd.allreduce_, (t,), {"nam": "bad.kw"}),
                             (hvd.allreduce_, (t, None, "bad.twice"), {"tensor": t}),
                             (hvd.allreduce_, (t,) + (None,) * 7, {}),
                             (hvd.broadcast_, (t,), {"name": "bad.noroot"}),
                             (hvd.allgather, (), {"name": "bad.notensor"}),
                             (hvd.allreduce, (t,), {"name": "bad.kw", "comp": None})):
        e = expect(TypeError, fn, *args, **kwargs)
        assert fn.__name__ in str(e), str(e)
    # An entry is made only for a Python function with its parameters, in its order.
    def renamed(tensor, root_rank, nam=None, process_set=None):
        pass
    e = expect(TypeError, hvd.mpi_ops.fast_entry, "broadcast_", renamed, None)
    assert "broadcast_" in str(e), str(e)
    # They show the signature, name and doc of the Python function each stands for.
    for fn, params in ((hvd.allreduce_, ["tensor", "average", "name", "op", "prescale_factor",
                                         "postscale_factor", "process_set"]),
                       (hvd.allreduce, ["tensor", "average", "name", "compression", "op",
                                        "prescale_factor", "postscale_factor", "process_set"]),
                       (hvd.broadcast_, ["tensor", "root_rank", "name", "process_set"]),
                       (hvd.allgather, ["tensor", "name", "process_set"])):
        sig = inspect.signature(fn)
        assert list(sig.parameters) == params, (fn, sig)
        assert sig.parameters["process_set"].default is hvd.global_process_set, sig
        assert sig.parameters["name"].default is None, sig
        assert sig == inspect.signature(fn.__wrapped__), sig
        shown = pydoc.render_doc(fn, renderer=pydoc.plaintext)
        assert fn.__doc__ and fn.__name__ + str(sig) in shown, shown
        # Pickled and copied as a function: by module and name.
        assert pickle.loads(pickle.dumps(fn)) is fn and copy.deepcopy(fn) is fn, fn

    interrupted_waits(hvd.rank())
    # The job still works after all of that.
    out = hvd.allreduce(torch.ones(3), op=hvd.Sum, name="after")
    assert torch.equal(out, torch.full((3,), float(hvd.size())))
    hvd.shutdown()
    # After shutdown: not initialized again.
    expect(ValueError, hvd.rank)
    print("PASS errors", flush=True)


if __name__ == "__main__":
    main()
