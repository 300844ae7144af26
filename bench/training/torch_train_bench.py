"""End-to-end training throughput with PyTorch: the same model, data and step count for
Perseus's DistributedOptimizer, Horovod's, and torch DDP over Gloo.

    perseusrun -np 2 python bench/training/torch_train_bench.py --library perseus
    horovodrun --gloo -np 2 -H localhost:2 python bench/training/torch_train_bench.py --library horovod
    python bench/training/torch_train_bench.py --library ddp --ranks 2      # spawns its ranks
    python bench/training/torch_train_bench.py --library none   # compute only, one process

Every rank computes with one thread (torch.set_num_threads(1)): on the 2-core bench host two
ranks then use the two cores, and the 1-rank run is the per-core baseline of the scaling
efficiency. Prints one JSON line (rank 0): samples/s over all ranks, median of --iters
timed windows of --steps steps each.
"""
import argparse
import json
import os
import socket
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model_spec import ModelSpec  # noqa: E402
from page_faults import minor_faults  # noqa: E402


class Net(nn.Module):
    """A small CNN front with a deep MLP body: many parameter tensors (2 per layer) of mixed
    sizes, as in real models, at a compute cost that 2 cores finish quickly."""

    def __init__(self, spec):
        super().__init__()
        self.conv1 = nn.Conv2d(spec.channels, spec.conv, 3, padding=1)
        self.conv2 = nn.Conv2d(spec.conv, spec.conv, 3, padding=1)
        dims = [spec.conv * (spec.image // 2) ** 2] + [spec.width] * spec.depth
        self.body = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims, dims[1:]))
        self.head = nn.Linear(spec.width, spec.classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv2(F.relu(self.conv1(x)))), 2).flatten(1)
        for layer in self.body:
            x = F.relu(layer(x))
        return self.head(x)


def train(args, rank, size, wrap_optimizer, model, after_init=None, counts=None):
    """(median seconds per step, model); `counts` (a dict), if given, gets faults_per_step:
    this process's minor page faults per timed step (page_faults.py)."""
    spec = args.spec
    torch.manual_seed(1234 + rank)
    data = torch.randn(args.batch_size, spec.channels, spec.image, spec.image)
    target = torch.randint(0, spec.classes, (args.batch_size,))
    optimizer = wrap_optimizer(torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9))
    if after_init:
        after_init(model, optimizer)

    def step():
        optimizer.zero_grad()
        F.cross_entropy(model(data), target).backward()
        optimizer.step()

    for _ in range(args.warmup):
        step()
    faults = minor_faults()
    windows = []
    for _ in range(args.iters):
        t0 = time.perf_counter()
        for _ in range(args.steps):
            step()
        windows.append(time.perf_counter() - t0)
    if counts is not None:
        counts["faults_per_step"] = (minor_faults() - faults) / (args.iters * args.steps)
    return statistics.median(windows) / args.steps, model


def report(args, rank, size, step_s, model, reduce_max, faults_per_step=None):
    step_s = reduce_max(step_s)  # the slowest rank sets the pace
    extra = {}
    if faults_per_step is not None:  # the rank that faults most
        extra["faults_per_step"] = reduce_max(faults_per_step)
    if rank == 0:
        params = list(model.parameters())
        print(json.dumps({
            "library": args.label or args.library, "framework": "torch", "collective": "train",
            "ranks": size, "batch_per_rank": args.batch_size, "step_ms": step_s * 1e3,
            "samples_per_s": size * args.batch_size / step_s, "tensors": len(params),
            "params": sum(p.numel() for p in params), "model": args.spec.describe(),
            **extra}), flush=True)


def run_hvd(args):
    if args.library == "perseus":
        import perseus.torch as hvd
    else:
        import horovod.torch as hvd
    hvd.init()
    model = Net(args.spec)

    def wrap(opt):
        return hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())

    def after_init(model, opt):
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(opt, root_rank=0)

    counts = {}
    step_s, model = train(args, hvd.rank(), hvd.size(), wrap, model, after_init, counts)

    def reduce_max(v):
        return hvd.allreduce(torch.tensor([v], dtype=torch.float64), op=hvd.Max,
                             name="bench.max").item()
    report(args, hvd.rank(), hvd.size(), step_s, model, reduce_max, counts["faults_per_step"])
    hvd.shutdown()


def ddp_worker(rank, args, port):
    import torch.distributed as dist
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=args.ranks)
    model = nn.parallel.DistributedDataParallel(Net(args.spec))  # broadcasts rank 0's weights
    step_s, model = train(args, rank, args.ranks, lambda opt: opt, model)

    def reduce_max(v):
        t = torch.tensor([v], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.item()
    report(args, rank, args.ranks, step_s, model.module, reduce_max)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--library", required=True, choices=("perseus", "horovod", "ddp", "none"))
    p.add_argument("--label", default=None)
    p.add_argument("--ranks", type=int, default=1, help="ddp only: ranks to spawn")
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--steps", type=int, default=10, help="steps per timed window")
    p.add_argument("--iters", type=int, default=5, help="timed windows")
    p.add_argument("--warmup", type=int, default=5)
    ModelSpec.add_arguments(p)
    args = p.parse_args()
    args.spec = ModelSpec.from_args(args)
    torch.set_num_threads(1)
    if args.library == "none":
        step_s, model = train(args, 0, 1, lambda opt: opt, Net(args.spec))
        return report(args, 0, 1, step_s, model, lambda v: v)
    if args.library != "ddp":
        return run_hvd(args)
    import torch.multiprocessing as mp
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(ddp_worker, args=(args, port), nprocs=args.ranks, start_method="spawn")


if __name__ == "__main__":
    sys.exit(main())
