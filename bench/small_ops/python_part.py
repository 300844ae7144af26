"""The Python part of a small collective, at world size 1: each perseus.torch call as a user
makes it ("whole") against the extension call that it makes, with its arguments ("core"), timed
with the thread's CPU clock (time.thread_time), which other processes taking the core do not
move. whole - core is what the Python layer costs per call; "python" is the Python function that
the whole call (a C entry, mpi_ops.fast_entry) stands for and falls back to.

    python -m perseus.runner -np 1 python bench/small_ops/python_part.py

Prints the fastest of the repetitions for each call, in microseconds."""

import argparse
import time
import timeit

import torch

import perseus.torch as hvd
from perseus.torch import _tensors as _t
from perseus.torch import autograd_ops as _autograd
from perseus.torch import mpi_ops as _ops

CALLS = {
    "allreduce core": "core.allreduce_tensor(t, 'pp.ar', 0, 1.0, 1.0, 0)",
    "allreduce whole": "hvd.allreduce_(t, name='pp.ar', op=hvd.Sum)",
    "allreduce python": "_ops.allreduce_blocking_(t, name='pp.ar', op=hvd.Sum)",
    "broadcast core": "core.broadcast_tensor(t, 'pp.bc', 0, 0)",
    "broadcast whole": "hvd.broadcast_(t, 0, name='pp.bc')",
    "broadcast python": "_ops.broadcast_blocking_(t, 0, name='pp.bc')",
    "allreduce copy": "hvd.allreduce(t, name='pp.arc', op=hvd.Sum)",
    "allreduce async": "_autograd._allreduce(t, name='pp.arc', op=hvd.Sum)",
    "allgather core": "core.allgather_tensor(t, 'pp.ag', 0, 16384, _t.empty_like_with_address)",
    "allgather address": "core.allgather_into('pp.ag', t.data_ptr(), code, t.shape, 0, "
                         "_t.empty_with_address, t.dtype)",
    "allgather whole": "hvd.allgather(t, name='pp.ag')",
    "allgather python": "_ag(t, name='pp.ag')",
    "allgather handle": "hvd.synchronize(hvd.allgather_async(t, name='pp.ag'))",
    "torch.empty(1)": "torch.empty(1)",  # a new tensor from Python, for scale
}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--number", type=int, default=3000)
    args = p.parse_args()
    hvd.init()
    t = torch.ones(1)
    env = dict(hvd=hvd, t=t, core=_ops._direct(), code=_t.dense_cpu_code(t), _t=_t, torch=torch,
               _ops=_ops, _ag=_autograd._allgather, _autograd=_autograd)
    best = {}
    for _ in range(args.reps):  # interleaved: every call sees the same machine
        for label, stmt in CALLS.items():
            timer = timeit.Timer(stmt, globals=env, timer=time.thread_time)
            us = timer.timeit(args.number) / args.number * 1e6
            best[label] = min(us, best.get(label, us))
    for label in CALLS:
        print("%-18s %.2f us" % (label, best[label]))
    hvd.shutdown()


if __name__ == "__main__":
    main()
