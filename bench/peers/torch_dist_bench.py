"""torch.distributed (Gloo) side of the peer benchmark: same sizes, timing rule and JSON lines
as the Perseus and Open MPI benchmarks (docs/PERFORMANCE.md).

    python bench/peers/torch_dist_bench.py --ranks 2 --max-mib 256 [--collective allreduce]

Starts its own ranks (multiprocessing spawn) over 127.0.0.1.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

COLLECTIVES = ("allreduce", "allgather", "broadcast", "reducescatter")


def bus_factor(name, n):
    if name == "allreduce":
        return 2.0 * (n - 1) / n
    if name == "broadcast":
        return 1.0
    return (n - 1) / n


def make_op(name, nbytes, rank, size):
    n = nbytes // 4
    if name in ("allgather", "reducescatter"):
        n -= n % size
        if n == 0:
            return None, 0
    x = torch.full((n,), float(rank + 1))
    if name == "allreduce":
        return (lambda: dist.all_reduce(x)), n * 4
    if name == "broadcast":
        return (lambda: dist.broadcast(x, 0)), n * 4
    if name == "allgather":
        part = x[: n // size].clone()
        out = torch.empty(n)
        return (lambda: dist.all_gather_into_tensor(out, part)), n * 4
    out = torch.empty(n // size)
    return (lambda: dist.reduce_scatter_tensor(out, x)), n * 4


def timed(op, k):
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(k):
        op()
    dt = torch.tensor([(time.perf_counter() - t0) / k], dtype=torch.float64)
    dist.all_reduce(dt, op=dist.ReduceOp.MAX)
    return dt.item()


def worker(rank, args, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=args.ranks)
    size = args.ranks
    names = COLLECTIVES if args.collective == "all" else (args.collective,)
    for name in names:
        nbytes = 4
        while nbytes <= args.max_mib * (1 << 20):
            op, eff = make_op(name, nbytes, rank, size)
            if op is not None:
                op()
                k = 1
                while True:  # calibrate: a sample lasts >= min_sample seconds
                    dt = timed(op, k) * k
                    if dt >= args.min_sample or k >= 1 << 20:
                        break
                    k = max(2, int(k * args.min_sample / max(dt, 1e-9) * 1.2) + 1)
                samples = sorted(timed(op, k) for _ in range(args.samples))
                med = statistics.median(samples)
                algbw = eff / med / 1e9
                if rank == 0:
                    print(json.dumps({
                        "library": "torch-gloo", "collective": name, "ranks": size, "bytes": eff,
                        "time_us": med * 1e6, "min_us": samples[0] * 1e6, "max_us": samples[-1] * 1e6,
                        "algbw_gbs": algbw, "busbw_gbs": algbw * bus_factor(name, size), "wrong": 0,
                    }), flush=True)
            nbytes *= 4
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--max-mib", type=float, default=256)
    p.add_argument("--collective", default="all", choices=("all",) + COLLECTIVES)
    p.add_argument("--samples", type=int, default=int(os.environ.get("SAMPLES", 11)))
    p.add_argument("--min-sample", type=float, default=float(os.environ.get("MIN_SAMPLE_S", 0.25)))
    args = p.parse_args()
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(worker, args=(args, port), nprocs=args.ranks, start_method="spawn")


if __name__ == "__main__":
    sys.exit(main())
