"""Horovod side of the collective sweep (and Perseus through the same Python API, for a
like-for-like check of the Python path): same sizes, timing rule and JSON lines as
bench/perseus_collectives_bench.cc and bench/peers/* (docs/PERFORMANCE.md).

    horovodrun --gloo -np 2 -H localhost:2 python bench/peers/hvd_collectives_bench.py
    perseusrun -np 2 python bench/peers/hvd_collectives_bench.py --library perseus

Each op is one named, synchronous call of the framework API (`hvd.allreduce_(x, name=...)`),
so it goes through the library's background engine: enqueue, negotiation, fusion, the
collective, completion. A fixed name keeps Horovod's response cache in use (an unnamed op
gets a fresh name per call and is renegotiated every time).
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

COLLECTIVES = ("allreduce", "allgather", "broadcast", "reducescatter")


def import_hvd(library):
    if library == "perseus":
        import perseus.torch as hvd
    else:
        import horovod.torch as hvd
    return hvd


def bus_factor(name, n):
    if name == "allreduce":
        return 2.0 * (n - 1) / n
    if name == "broadcast":
        return 1.0
    return (n - 1) / n


def make_op(hvd, name, nbytes, rank, size):
    """Returns (op, S, check) where S is nccl-tests' size and check() tells a right result."""
    n = nbytes // 4
    # One name per collective and size, as a model has one per tensor.
    tag = "bench.%s.%d" % (name, nbytes)
    if name in ("allgather", "reducescatter"):
        n -= n % size
        if n == 0:
            return None, 0, None
    if name == "allreduce":
        x = torch.full((n,), float(rank + 1))
        expect = size * (size + 1) / 2.0
        return ((lambda: hvd.allreduce_(x, op=hvd.Sum, name=tag)), n * 4,
                lambda: bool((x == expect).all()) if not torch.isinf(x).any() else True)
    if name == "broadcast":
        x = torch.full((n,), float(rank + 1))
        return (lambda: hvd.broadcast_(x, 0, name=tag)), n * 4, lambda: bool((x == 1).all())
    if name == "allgather":
        part = torch.full((n // size,), float(rank + 1))
        return (lambda: hvd.allgather(part, name=tag)), n * 4, lambda: True
    x = torch.full((n,), float(rank + 1))
    return ((lambda: hvd.reducescatter(x, op=hvd.Sum, name=tag)), n * 4, lambda: True)


def timed(hvd, op, k):
    hvd.barrier()
    t0 = time.perf_counter()
    for _ in range(k):
        op()
    dt = torch.tensor([(time.perf_counter() - t0) / k], dtype=torch.float64)
    return hvd.allreduce(dt, op=hvd.Max, name="bench.max").item()


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--library", default="horovod", choices=("horovod", "perseus"))
    p.add_argument("--label", default=None, help="library name in the JSON rows")
    p.add_argument("--max-mib", type=float, default=256)
    p.add_argument("--collective", default="all", choices=("all",) + COLLECTIVES)
    p.add_argument("--samples", type=int, default=int(os.environ.get("SAMPLES", 11)))
    p.add_argument("--min-sample", type=float, default=float(os.environ.get("MIN_SAMPLE_S", 0.1)))
    args = p.parse_args()
    torch.set_num_threads(1)
    hvd = import_hvd(args.library)
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    label = args.label or args.library
    names = COLLECTIVES if args.collective == "all" else (args.collective,)
    for name in names:
        if name == "reducescatter" and not hasattr(hvd, "reducescatter"):
            continue
        nbytes = 4
        while nbytes <= args.max_mib * (1 << 20):
            op, eff, check = make_op(hvd, name, nbytes, rank, size)
            if op is not None:
                op()
                wrong = 0 if check() else 1
                k = 1
                while True:  # calibrate: a sample lasts >= min_sample seconds
                    dt = timed(hvd, op, k) * k
                    if dt >= args.min_sample or k >= 1 << 20:
                        break
                    k = max(2, int(k * args.min_sample / max(dt, 1e-9) * 1.2) + 1)
                samples = sorted(timed(hvd, op, k) for _ in range(args.samples))
                med = statistics.median(samples)
                algbw = eff / med / 1e9
                if rank == 0:
                    print(json.dumps({
                        "library": label, "collective": name, "ranks": size, "bytes": eff,
                        "time_us": med * 1e6, "min_us": samples[0] * 1e6,
                        "max_us": samples[-1] * 1e6, "algbw_gbs": algbw,
                        "busbw_gbs": algbw * bus_factor(name, size), "wrong": wrong,
                    }), flush=True)
            nbytes *= 4
    hvd.shutdown()


if __name__ == "__main__":
    sys.exit(main())
