"""FSDP2 (`fully_shard`) step time on one torch.distributed backend, on a fixed MLP of about
50M parameters: `depth` blocks of Linear(width, width) + ReLU, each block sharded, then the
root. At the defaults (width 2048, depth 12) that is 12 x 4.2M = 50.4M parameters, 200 MB of
fp32 that every step all-gathers twice (forward, backward) and reduce-scatters once.

    python bench/torch_distributed/fsdp.py --backend perseus --ranks 2    # spawns its ranks
    python bench/torch_distributed/fsdp.py --backend gloo --ranks 4

Where the time goes: FSDP2 on CPU issues every all-gather and reduce-scatter as a blocking call
(its prefetching overlaps through CUDA streams, which are no-ops on CPU), so nothing overlaps
compute. A step is the "local" backend's step (compute and FSDP2's copies into and out of the
collectives' buffers) plus the time in 24 all-gathers (each block's 16.8 MB of parameters,
gathered before its forward and again before its backward; the root holds none) and 12
reduce-scatters (each block's gradients, ReduceOp.AVG) at the defaults. On perseus an
all-gather writes into FSDP2's output itself, whose chunk of this rank already holds its shard
(FSDP2's input is a view of it), reading the other ranks' shards from their memory
(single-copy, src/collectives/single_copy_shm.cc; split among threads where a rank has cores
to spare); a reduce-scatter stages the gradients through
the shared-memory slots and reduces this rank's block into FSDP2's output, scaling each reduced
piece by 1/ranks while it is in cache (AVG is SUM and a postscale). Both run on the engine's
thread while FSDP2's waits.

Every rank computes with one thread. The timed steps start once every rank's malloc heap has
stopped growing (settle(); settle_steps in the output): until then a step's time is mostly
the page faults of glibc's heap growing into FSDP2's buffers, how many steps that lasts varies
between backends and between ranks, and a training job is past it in its first minute. Prints
one JSON line (rank 0): the median step over --iters timed windows of --steps steps (the
slowest rank's), and where rank 0's steps went
(collective_clock.py): collective_ms, the time in the all-gathers and reduce-scatters after
the last rank called them (the backend's own time), and waiting_ms, the time in them before
that (the other rank's compute or collective ending later), per step over all timed steps.
The rest of a step is compute and FSDP2's own copies, which the "local" backend's step is.
faults_per_step: the most minor page faults per timed step of any rank
(bench/training/page_faults.py). per_rank: each rank's own step, faults and waiting;
last_arrivals: how many calls each rank was the last to make.
"""
import argparse
import json
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import placement
import rank_exit
from collective_clock import CollectiveClock

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "training"))
from page_faults import (heap_bytes, minor_faults, thread_faults_between,  # noqa: E402
                         thread_minor_faults)


def build(width, depth, world):
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.ReLU())
                            for _ in range(depth)])
    mesh = init_device_mesh("cpu", (world,))
    for block in model:
        fully_shard(block, mesh=mesh)
    return fully_shard(model, mesh=mesh)


def settle(step, most, quiet=3):
    """Steps until no rank's malloc heap has grown past its high-water mark for `quiet` steps
    in a row, at most `most` steps; returns how many it took. In FSDP2's first steps glibc's
    heap keeps growing (by up to hundreds of MB a step, each new page a page fault) while its
    free chunks fragment into a shape that fits the all-gathered blocks and gradients; once
    they fit, a step faults almost nothing. How many steps that takes depends on the order of
    allocations and frees, which differs between backends and between ranks; a training job
    is past it within its first minute, so the timed steps start after it. The ranks agree
    (an allreduce of a flag), since FSDP2's ranks must take the same number of steps."""
    high, still, taken = heap_bytes(), 0, 0
    while taken < most and still < quiet:
        faults = minor_faults()
        step()
        taken += 1
        now = heap_bytes()
        grew = (now > high) if now is not None else (minor_faults() - faults > 256)
        high = max(high, now) if now is not None else high
        flag = torch.tensor([float(grew)])
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        still = 0 if flag.item() else still + 1
    return taken


def time_steps(args, model, rank, clock):
    """(median seconds per step, this process's minor page faults per timed step, those faults
    by thread name, the steps settle took)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    data = torch.Generator().manual_seed(rank)
    x = torch.randn(args.batch_size, args.width, generator=data)
    y = torch.randn(args.batch_size, args.width, generator=data)

    def step():
        loss = F.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    for _ in range(args.warmup):
        step()
    settle_steps = settle(step, args.settle)
    clock.reset()
    faults, by_thread = minor_faults(), thread_minor_faults()
    windows = []
    for _ in range(args.iters):
        t0 = time.perf_counter()
        for _ in range(args.steps):
            step()
        windows.append((time.perf_counter() - t0) / args.steps)
    steps = args.iters * args.steps
    return (statistics.median(windows), (minor_faults() - faults) / steps,
            thread_faults_between(by_thread, thread_minor_faults(), steps), settle_steps)


def worker(rank, args, port):
    if args.bind_to == "core":
        placement.bind(rank, args.ranks, args.backend)
    torch.set_num_threads(1)
    if args.backend == "perseus":
        import perseus.torch  # noqa: F401  (registers the backend)
    elif args.backend == "local":
        import local_backend  # the floor: no communication (local_backend.py)
        local_backend.register()
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group(args.backend, rank=rank, world_size=args.ranks)
    model = build(args.width, args.depth, args.ranks)
    clock = CollectiveClock().install()
    mine = time_steps(args, model, rank, clock)
    slowest = torch.tensor(mine[:2], dtype=torch.float64)
    split = clock.split(args.iters * args.steps, synchronized=args.backend != "local")
    # Each rank's step, faults and waiting: where the ranks differ, the slow one shows.
    ranks = [None] * args.ranks
    dist.all_gather_object(ranks, {"step_ms": round(mine[0] * 1e3, 1),
                                   "faults_per_step": round(mine[1]),
                                   "faults_by_thread": mine[2],
                                   "waiting_ms": round(split["waiting_ms"], 1)})
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)  # the slowest step, the most faults
    if rank == 0:
        params = sum(p.numel() for p in model.parameters())  # DTensor numel: the full size
        print(json.dumps({
            "bench": "fsdp2", "library": args.backend, "ranks": args.ranks,
            "batch_per_rank": args.batch_size, "step_ms": slowest[0].item() * 1e3,
            "faults_per_step": slowest[1].item(),
            "params": params, "model": "mlp%dx%d" % (args.depth, args.width),
            "settle_steps": mine[3],
            "per_rank": ranks, **split}), flush=True)
    rank_exit.leave()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", required=True)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--depth", type=int, default=12)
    p.add_argument("--batch-size", type=int, default=8, help="per rank")
    p.add_argument("--steps", type=int, default=2, help="steps per timed window")
    p.add_argument("--iters", type=int, default=3, help="timed windows")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--settle", type=int, default=40,
                   help="at most this many more untimed steps, until the heap stops growing "
                        "(settle()); 0 times from right after --warmup")
    placement.add_argument(p)
    args = p.parse_args()
    mp.start_processes(worker, args=(args, free_port()), nprocs=args.ranks, start_method="spawn")


if __name__ == "__main__":
    main()
