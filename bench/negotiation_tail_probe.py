"""Where the last tensor of a step of T small allreduces spends its time, Python side (the
split behind the negotiation figure of docs/PERFORMANCE.md):

    perseusrun -np 2 python bench/negotiation_tail_probe.py [--tensors 10,1000] [--steps 60]

Each step submits T named 16-byte allreduce_async_ (as the negotiation benchmark does), then
times the parts of `synchronize` for the last handle: the framework's handle lookup (take),
the core wait, and the output hand-back (finish); and, as a marker of how cold the caches are
after the loop, two back-to-back perf_counter() calls (clock). Prints the medians per rank.
"""
import argparse
import statistics
import time

import torch

import perseus.torch as hvd
from perseus.torch import mpi_ops


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tensors", type=lambda s: [int(v) for v in s.split(",")], default=[10, 1000])
    p.add_argument("--steps", type=int, default=60)
    args = p.parse_args()
    hvd.init()
    for count in args.tensors:
        tensors = [torch.ones(4) for _ in range(count)]
        names = ["neg.%d" % i for i in range(count)]
        clock, take, wait, finish = [], [], [], []
        for _ in range(args.steps):
            hvd.barrier()
            handles = [hvd.allreduce_async_(t, op=hvd.Sum, name=n) for t, n in zip(tensors, names)]
            t0 = time.perf_counter()
            t1 = time.perf_counter()
            pending = mpi_ops._t.take(handles[-1])
            t2 = time.perf_counter()
            pending.core.wait()
            t3 = time.perf_counter()
            mpi_ops._wait_device(pending)
            pending.finish(pending.core)
            t4 = time.perf_counter()
            for h in handles[:-1]:
                hvd.synchronize(h)
            clock.append(t1 - t0)
            take.append(t2 - t1)
            wait.append(t3 - t2)
            finish.append(t4 - t3)
        med = lambda xs: statistics.median(xs) * 1e6  # noqa: E731
        print("rank %d, %d tensors: clock %.2f us, take %.2f us, wait %.2f us, finish %.2f us "
              "(medians)" % (hvd.rank(), count, med(clock), med(take), med(wait), med(finish)),
              flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
