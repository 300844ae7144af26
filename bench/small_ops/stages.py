"""Where a small collective's time goes from Python: each stage of the perseus.torch call timed
alone, interleaved with the whole call and with mpi4py in the same processes (2 ranks).

    mpirun --bind-to none -np 2 python bench/small_ops/stages.py          # or perseusrun

Stages, per op (float32, in place where the op is):
  view        the extension reading the tensor alone (torch's DLPack exchange API, through a
              FASTCALL that returns before any collective)
  core        the extension call with the tensor: the view, binding, C API, engine, wait
  address     the by-address extension call with precomputed arguments (a tensor the view
              cannot read goes this way, after the Python getters)
  whole       hvd.allreduce_ / hvd.broadcast_ / hvd.allgather as a user calls them (C functions
              that bind the arguments and make the core call, mpi_ops.fast_entry)
  python      the Python function each of those stands for and falls back to (the whole call
              before they were C functions)
  handle      the asynchronous path: capsule, handle, wait, output
  copy        allreduce only: hvd.allreduce, the result in a new tensor (a C entry too), with
              "copy python" its Python function and "mpi4py copy" Allreduce into a buffer
  new tensor  allreduce and allgather: the extension making a tensor of the result's size from
              C, alone (no collective): what copy and allgather's whole pay beyond the
              collective at least
  mpi4py      the peer, same sizes
  one copy    broadcast, 2 ranks: the bytes copied once from the root's memory, raw (the floor
              of a broadcast that moves them once, as both libraries do from 64 KiB)
  two copies  allgather, 2 ranks: the peer's piece copied from its memory and the own piece
              copied, raw, into a buffer kept between calls (the floor of mpi4py's Allgather)
Prints one line per (op, bytes, stage): the fastest and the median repetition of the slowest
rank's per-op time, and the fastest's ratio to mpi4py's. Short samples, many repetitions and
the fastest: on a loaded host most samples catch a rank off its core, and the fastest is the
one that did not. The ratios carry over between machines; the absolute figures do not."""

import argparse
import ctypes
import os
import random
import statistics
import sys

try:  # before Perseus and torch: MPI must be initialised first (docs/cluster.md)
    from mpi4py import MPI
except ImportError:
    MPI = None
import torch  # noqa: E402

import perseus.torch as hvd  # noqa: E402
from perseus.torch import _tensors as _t  # noqa: E402
from perseus.torch import autograd_ops as _autograd  # noqa: E402
from perseus.torch import mpi_ops as _ops  # noqa: E402
from worker import sample  # noqa: E402  (the same sampling as run.py's)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="4,64,1024,4096")
    p.add_argument("--reps", type=int, default=31)
    p.add_argument("--k", type=int, default=300, help="ops per sample")
    return p.parse_args()


def view_stage(core, t):
    # allgather_tensor views the tensor, then finds it larger than max_bytes=-1 and returns.
    return lambda: core.allgather_tensor(t, "st.view", 0, -1, None)


def allreduce_stages(t, tag, comm):
    core = _ops._direct()
    name = "st.ar." + tag
    args = (name, t.data_ptr(), _t.dense_cpu_code(t), t.shape, 0, 1.0, 1.0, 0)
    a = t.numpy()
    stages = {
        "view": view_stage(core, t),
        "core": lambda: core.allreduce_tensor(t, name, 0, 1.0, 1.0, 0),
        "address": lambda: core.allreduce_inplace(*args),
        "whole": lambda: hvd.allreduce_(t, name=name, op=hvd.Sum),
        "python": lambda: _ops.allreduce_blocking_(t, name=name, op=hvd.Sum),
        "handle": lambda: hvd.synchronize(hvd.allreduce_async_(t, name=name, op=hvd.Sum)),
    }
    stages["copy"] = lambda: hvd.allreduce(t, name=name + ".copy", op=hvd.Sum)
    stages["copy python"] = lambda: _autograd._allreduce(t, name=name + ".copy", op=hvd.Sum)
    add_new_tensor(stages, core, t)
    if comm is not None:
        out = a.copy()
        stages["mpi4py"] = lambda: comm.Allreduce(MPI.IN_PLACE, a, op=MPI.SUM)
        stages["mpi4py copy"] = lambda: comm.Allreduce(a, out, op=MPI.SUM)
    return stages


def broadcast_stages(t, tag, comm):
    core = _ops._direct()
    name = "st.bc." + tag
    args = (name, t.data_ptr(), _t.dense_cpu_code(t), t.shape, 0, 0)
    a = t.numpy()
    stages = {
        "view": view_stage(core, t),
        "core": lambda: core.broadcast_tensor(t, name, 0, 0),
        "address": lambda: core.broadcast_inplace(*args),
        "whole": lambda: hvd.broadcast_(t, 0, name=name),
        "python": lambda: _ops.broadcast_blocking_(t, 0, name=name),
        "handle": lambda: hvd.synchronize(hvd.broadcast_async_(t, 0, name=name)),
    }
    if comm is not None:
        stages["mpi4py"] = lambda: comm.Bcast(a, root=0)
    add_copy_floors(stages, "broadcast", t, None)
    return stages


def allgather_stages(t, tag, comm):
    core = _ops._direct()
    name = "st.ag." + tag
    code = _t.dense_cpu_code(t)
    a = t.numpy()
    out = torch.empty(t.numel() * hvd.size()).numpy()
    stages = {
        "view": view_stage(core, t),
        "core": lambda: core.allgather_tensor(t, name, 0, 1 << 14, _t.empty_like_with_address),
        "address": lambda: core.allgather_into(name, t.data_ptr(), code, t.shape, 0,
                                               _t.empty_with_address, t.dtype),
        "whole": lambda: hvd.allgather(t, name=name),
        "python": lambda: _autograd._allgather(t, name=name),
        "handle": lambda: hvd.synchronize(hvd.allgather_async(t, name=name)),
    }
    add_new_tensor(stages, core, torch.empty((t.shape[0] * hvd.size(),) + t.shape[1:]))
    if comm is not None:
        stages["mpi4py"] = lambda: comm.Allgather(a, out)
    add_copy_floors(stages, "allgather", t, torch.from_numpy(out))
    return stages


class _Iovec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


def _cross_memory_read():
    """read(pid, remote_address, local_address, nbytes) by process_vm_readv, or None."""
    fn = getattr(ctypes.CDLL(None, use_errno=True), "process_vm_readv", None)
    if fn is None:
        return None
    fn.restype = ctypes.c_ssize_t
    fn.argtypes = [ctypes.c_int, ctypes.POINTER(_Iovec), ctypes.c_ulong, ctypes.POINTER(_Iovec),
                   ctypes.c_ulong, ctypes.c_ulong]

    def read(pid, remote, local, nbytes):
        there, here = _Iovec(remote, nbytes), _Iovec(local, nbytes)
        if fn(pid, ctypes.byref(here), 1, ctypes.byref(there), 1, 0) != nbytes:
            raise OSError(ctypes.get_errno(), "process_vm_readv")
    return read


def add_copy_floors(stages, op, t, out):
    """The bytes' own floor, in the same processes (2 ranks): "one copy" for a broadcast, rank
    1 reading rank 0's tensor straight out of its memory (cross-memory attach, what Open MPI's
    vader and Perseus's posts by address do for these sizes) while rank 0 does nothing; "two
    copies" for an allgather into a buffer the caller keeps (mpi4py's way), each rank reading
    the other's piece that way and copying its own. No synchronisation: a copy cannot take less."""
    read = _cross_memory_read()
    if read is None or hvd.size() != 2:
        return
    rank, nbytes = hvd.rank(), t.numel() * t.element_size()
    pids = hvd.allgather_object((os.getpid(), t.data_ptr()))
    peer_pid, peer_address = pids[1 - rank]
    if op == "broadcast":
        mine = t.data_ptr()
        stages["one copy"] = (lambda: read(peer_pid, peer_address, mine, nbytes)) if rank else (
            lambda: None)
    else:
        pieces = out.view(2, -1)
        into, own, src = pieces[1 - rank].data_ptr(), pieces[rank].data_ptr(), t.data_ptr()

        def two_copies():
            read(peer_pid, peer_address, into, nbytes)
            ctypes.memmove(own, src, nbytes)  # one thread, as MPI's own copy
        stages["two copies"] = two_copies


def add_new_tensor(stages, core, like):
    # The result tensor alone, made from C as the calls make theirs: their floor above the
    # collective (absent from an extension without it).
    make = getattr(core, "new_tensor_like", None)
    if make is not None:
        stages["new tensor"] = lambda: make(like)


def main():
    args = parse_args()
    hvd.init()
    comm = MPI.COMM_WORLD if MPI is not None else None
    builders = {"allreduce": allreduce_stages, "broadcast": broadcast_stages,
                "allgather": allgather_stages}
    results = {}
    for nbytes in (int(s) for s in args.sizes.split(",")):
        t = torch.full((max(1, nbytes // 4),), float(hvd.rank() + 1))
        for op, build in builders.items():
            stages = build(t, str(nbytes), comm)
            for rep in range(args.reps):
                # Shuffled alike on every rank (seeded by the repetition), so that no stage
                # always follows the same one: a stage that leaves freed pages behind (a fresh
                # large result) would otherwise make its successor fault them in every time.
                order = list(stages.items())
                random.Random(rep).shuffle(order)
                for stage, fn in order:
                    results.setdefault((op, nbytes, stage), []).append(sample(fn, args.k))
    if hvd.rank() == 0:
        print("op bytes stage min_us median_us min_vs_mpi4py")
        for (op, nbytes, stage), s in results.items():
            peer = results.get((op, nbytes, "mpi4py"))
            ratio = "%.2f" % (min(s) / min(peer)) if peer else "-"
            print("%s %d %s %.2f %.2f %s" % (op, nbytes, stage, min(s) * 1e6,
                                              statistics.median(s) * 1e6, ratio), flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    sys.exit(main())
