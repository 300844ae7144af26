"""DDP training throughput on one torch.distributed backend: the model, data and step loop of
bench/training/torch_train_bench.py (its `ddp` library is this with backend gloo), so that the
perseus backend compares with the Horovod-API figures of that bench.

    python bench/torch_distributed/ddp.py --backend perseus --ranks 2     # spawns its ranks
    python bench/torch_distributed/ddp.py --backend gloo --ranks 2

Every rank computes with one thread. Prints one JSON line (rank 0): samples/s over all ranks,
from the median of --iters timed windows of --steps steps each (the slowest rank's), the
most minor page faults per timed step of any rank (bench/training/page_faults.py), and what
the backend's allreduces of DDP's buckets take alone (`comm_ms`): after training, in the same
processes, a tensor of each bucket's size allreduced the way DDP's reducer issues them (all
asynchronous, in bucket order, then waited for), the slowest rank's median of --comm-reps. Each
rank computes on one core here, so the communication cannot hide behind the backward pass, and
the no-communication step plus `comm_ms` is about the best step this backend's allreduce allows.
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

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "training"))
from model_spec import ModelSpec  # noqa: E402
from torch_train_bench import Net, train  # noqa: E402

import placement  # noqa: E402
import rank_exit  # noqa: E402


def bucket_bytes(model):
    """DDP's bucket sizes in bytes, in bucket order (the reducer's logging data; all the
    parameters' bytes as one bucket where a torch does not report them)."""
    try:
        sizes = model._get_ddp_logging_data().get("bucket_sizes", "")
        found = [int(s) for s in str(sizes).split(",") if s.strip()]
        if found:
            return found
    except (AttributeError, RuntimeError, ValueError):
        pass
    return [sum(p.numel() * p.element_size() for p in model.parameters())]


def bucket_allreduce_ms(sizes, reps):
    """The slowest rank's median time of one step's bucket allreduces alone."""
    buckets = [torch.zeros(max(1, n // 4), dtype=torch.float32) for n in sizes]
    times = []
    for i in range(reps + 3):
        dist.barrier()
        start = time.perf_counter()
        for work in [dist.all_reduce(b, async_op=True) for b in buckets]:
            work.wait()
        if i >= 3:
            times.append(time.perf_counter() - start)
    mine = torch.tensor([statistics.median(times) * 1e3], dtype=torch.float64)
    dist.all_reduce(mine, op=dist.ReduceOp.MAX)
    return mine.item()


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
    model = nn.parallel.DistributedDataParallel(Net(args.spec))
    counts = {}
    step_s, _ = train(args, rank, args.ranks, lambda opt: opt, model, counts=counts)
    slowest = torch.tensor([step_s, counts["faults_per_step"]], dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)  # the slowest step, the most faults
    step_s, faults = slowest.tolist()
    sizes = bucket_bytes(model)
    comm_ms = bucket_allreduce_ms(sizes, args.comm_reps)
    if rank == 0:
        params = list(model.parameters())
        print(json.dumps({
            "bench": "ddp", "library": args.backend, "ranks": args.ranks,
            "batch_per_rank": args.batch_size, "step_ms": step_s * 1e3,
            "samples_per_s": args.ranks * args.batch_size / step_s, "tensors": len(params),
            "params": sum(p.numel() for p in params), "model": args.spec.describe(),
            "faults_per_step": faults, "bucket_bytes": sizes, "comm_ms": comm_ms}),
            flush=True)
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
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--steps", type=int, default=10, help="steps per timed window")
    p.add_argument("--iters", type=int, default=5, help="timed windows")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--comm-reps", type=int, default=30,
                   help="repetitions of the bucket allreduces alone, after training")
    placement.add_argument(p)
    ModelSpec.add_arguments(p)
    args = p.parse_args()
    args.spec = ModelSpec.from_args(args)
    mp.start_processes(worker, args=(args, free_port()), nprocs=args.ranks, start_method="spawn")


if __name__ == "__main__":
    main()
