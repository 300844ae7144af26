"""One rank of bench/small_ops/run.py: times small to large allreduce, broadcast and allgather
through every library present in this one process, interleaved (each repetition runs every
library at every size, in a rotating order), so that every library sees the same machine.

Started by run.py under Open MPI's mpirun (mpi4py needs it; Perseus and torch.distributed read
the rank from its environment) or, without Open MPI, under perseusrun. Writes one JSON object
per (library, op, bytes) from rank 0: the per-op time of each repetition (the slowest rank's
elapsed time over k back-to-back ops)."""

import argparse
import json
import os
import sys
import time

import numpy as np

try:  # before Perseus and torch: MPI must be initialised first (docs/cluster.md)
    from mpi4py import MPI
except ImportError:
    MPI = None
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import perseus.torch as hvd  # noqa: E402

OPS = ("allreduce", "broadcast", "allgather")


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", default="4,64,1024,4096,65536,262144,1048576,4194304,16777216,"
                   "67108864", help="bytes per rank")
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--budget-ms", type=float, default=20.0,
                   help="rough time per sample; sets k per size")
    p.add_argument("--libs", default="perseus.torch,perseus.mxnet,mpi4py,gloo")
    p.add_argument("--ops", default=",".join(OPS), help="comma-separated: " + ", ".join(OPS))
    p.add_argument("--out", required=True)
    return p.parse_args()


def k_for(nbytes, budget_ms):
    """Back-to-back ops per sample: about budget_ms at a rough 1 GB/s plus 2 us per op."""
    per_op_us = 2.0 + nbytes / 1e3
    return int(max(3, min(5000, budget_ms * 1e3 / per_op_us)))


class PerseusTorch:
    name = "perseus.torch"

    def __init__(self, nbytes, rank, size):
        self.t = torch.full((max(1, nbytes // 4),), float(rank + 1))
        # The names made once, as a training loop's are: a string built per call is the
        # harness's cost, not the library's.
        self.ar, self.bc, self.ag = ("%s.%d" % (op, nbytes) for op in ("ar", "bc", "ag"))

    def allreduce(self):
        hvd.allreduce_(self.t, name=self.ar, op=hvd.Sum)

    def broadcast(self):
        hvd.broadcast_(self.t, 0, name=self.bc)

    def allgather(self):
        hvd.allgather(self.t, name=self.ag)


class PerseusMxnet:
    name = "perseus.mxnet"

    def __init__(self, nbytes, rank, size):
        import mxnet as mx
        import perseus.mxnet as phvd
        self.hvd = phvd
        self.t = mx.nd.full((max(1, nbytes // 4),), float(rank + 1), dtype="float32")
        self.ar, self.bc, self.ag = ("%s.%d" % (op, nbytes) for op in ("ar", "bc", "ag"))

    def allreduce(self):
        self.hvd.allreduce_(self.t, name=self.ar, op=self.hvd.Sum)
        self.t.wait_to_read()

    def broadcast(self):
        self.hvd.broadcast_(self.t, 0, name=self.bc)
        self.t.wait_to_read()

    def allgather(self):
        self.hvd.allgather(self.t, name=self.ag).wait_to_read()


class Mpi4py:
    name = "mpi4py"

    def __init__(self, nbytes, rank, size):
        self.comm = MPI.COMM_WORLD
        self.a = np.full(max(1, nbytes // 4), float(rank + 1), dtype=np.float32)
        self.out = np.empty(self.a.size * size, dtype=np.float32)

    def allreduce(self):
        self.comm.Allreduce(MPI.IN_PLACE, self.a, op=MPI.SUM)

    def broadcast(self):
        self.comm.Bcast(self.a, root=0)

    def allgather(self):
        self.comm.Allgather(self.a, self.out)


class Gloo:
    name = "gloo"

    def __init__(self, nbytes, rank, size):
        self.t = torch.full((max(1, nbytes // 4),), float(rank + 1))
        self.out = torch.empty(self.t.numel() * size)

    def allreduce(self):
        dist.all_reduce(self.t)

    def broadcast(self):
        dist.broadcast(self.t, 0)

    def allgather(self):
        dist.all_gather_into_tensor(self.out, self.t)


def available(libs):
    """The libraries to time, and a message for each one skipped."""
    chosen, skipped = [], []
    for lib in libs:
        if lib == "mpi4py" and MPI is None:
            skipped.append("mpi4py: not installed (pip install mpi4py; needs Open MPI)")
            continue
        if lib == "perseus.mxnet":
            try:
                import mxnet  # noqa: F401
            except ImportError:
                skipped.append("perseus.mxnet: mxnet is not installed")
                continue
        chosen.append({"perseus.torch": PerseusTorch, "perseus.mxnet": PerseusMxnet,
                       "mpi4py": Mpi4py, "gloo": Gloo}[lib])
    return chosen, skipped


def slowest(seconds):
    """The largest value over ranks (Perseus's own allreduce: present in every run)."""
    t = torch.tensor([seconds], dtype=torch.float64)
    hvd.allreduce_(t, name="bench.slowest", op=hvd.Max)
    return float(t[0])


def sample(fn, k):
    fn()
    fn()
    hvd.barrier()
    start = time.perf_counter()
    for _ in range(k):
        fn()
    return slowest((time.perf_counter() - start) / k)


def main():
    args = parse_args()
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    if "gloo" in args.libs:
        dist.init_process_group("gloo", init_method=os.environ["SMALL_OPS_GLOO_INIT"],
                                rank=rank, world_size=size)
    libs, skipped = available(args.libs.split(","))
    sizes = [int(s) for s in args.sizes.split(",")]
    ops = [op for op in args.ops.split(",") if op in OPS]
    samples = {}
    for rep in range(args.reps if libs else 0):  # none available: only the skips are written
        for nbytes in sizes:
            k = k_for(nbytes, args.budget_ms)
            instances = [lib(nbytes, rank, size) for lib in libs]
            shift = rep % len(instances)
            for inst in instances[shift:] + instances[:shift]:
                for op in ops:
                    per_op = sample(getattr(inst, op), k)
                    samples.setdefault((inst.name, op, nbytes), []).append(per_op)
    if rank == 0:
        with open(args.out, "w") as f:
            for msg in skipped:
                f.write(json.dumps({"skipped": msg}) + "\n")
            for (lib, op, nbytes), s in samples.items():
                f.write(json.dumps({"lib": lib, "op": op, "bytes": nbytes, "ranks": size,
                                    "seconds": s}) + "\n")
    hvd.barrier()
    if "gloo" in args.libs:
        dist.destroy_process_group()
    hvd.shutdown()


if __name__ == "__main__":
    sys.exit(main())
