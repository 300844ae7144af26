"""DDP training throughput on one torch.distributed backend: the model, data and step loop of
bench/training/torch_train_bench.py (its `ddp` library is this with backend gloo), so that the
perseus backend compares with the Horovod-API figures of that bench.

    python bench/torch_distributed/ddp.py --backend perseus --ranks 2     # spawns its ranks
    python bench/torch_distributed/ddp.py --backend gloo --ranks 2

Every rank computes with one thread. Prints one JSON line (rank 0): samples/s over all ranks,
from the median of --iters timed windows of --steps steps each (the slowest rank's), and the
most minor page faults per timed step of any rank (bench/training/page_faults.py).
"""
import argparse
import json
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "training"))
from model_spec import ModelSpec  # noqa: E402
from torch_train_bench import Net, train  # noqa: E402

import placement  # noqa: E402


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
    if rank == 0:
        params = list(model.parameters())
        print(json.dumps({
            "bench": "ddp", "library": args.backend, "ranks": args.ranks,
            "batch_per_rank": args.batch_size, "step_ms": step_s * 1e3,
            "samples_per_s": args.ranks * args.batch_size / step_s, "tensors": len(params),
            "params": sum(p.numel() for p in params), "model": args.spec.describe(),
            "faults_per_step": faults}),
            flush=True)
    dist.destroy_process_group()


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
    placement.add_argument(p)
    ModelSpec.add_arguments(p)
    args = p.parse_args()
    args.spec = ModelSpec.from_args(args)
    mp.start_processes(worker, args=(args, free_port()), nprocs=args.ranks, start_method="spawn")


if __name__ == "__main__":
    main()
