"""DistributedDataParallel with torch's built-in communication hooks, on the "perseus" backend.

A plain torch.distributed script: the only Perseus lines are `import perseus.torch` and the
backend name. It trains one small MLP per hook (none, fp16_compress_hook, bf16_compress_hook,
PowerSGD) from the same start and data, and rank 0 prints one JSON line per hook: the global
mean loss of every step and the sum of every parameter at the end.

    torchrun --nproc-per-node 2 ddp_comm_hooks.py
    perseusrun -np 2 python ddp_comm_hooks.py
    torchrun --nproc-per-node 2 ddp_comm_hooks.py --backend gloo     # the same run on Gloo
"""
import argparse
import json

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.nn.parallel import DistributedDataParallel as DDP

import perseus.torch  # noqa: F401  (registers the "perseus" backend)

HOOKS = ("none", "fp16", "bf16", "powersgd")


def register_hook(ddp, name):
    if name == "fp16":
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif name == "bf16":
        ddp.register_comm_hook(None, default_hooks.bf16_compress_hook)
    elif name == "powersgd":
        # Error feedback and warm start need at least 2 plain allreduce steps first.
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=1,
                                            start_powerSGD_iter=2, random_seed=0)
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)


def train(hook, steps, rank, world):
    torch.manual_seed(0)  # every rank starts from the same weights (DDP broadcasts rank 0's)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                          nn.Linear(64, 4))
    ddp = DDP(model)
    register_hook(ddp, hook)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    data = torch.Generator().manual_seed(100 + rank)  # each rank its own shard of the data
    losses = []
    for _ in range(steps):
        x = torch.randn(16, 32, generator=data)
        y = torch.randn(16, 4, generator=data)
        loss = F.mse_loss(ddp(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(mean.item() / world)
    return losses, [p.detach().sum().item() for p in model.parameters()]


def parser():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", default="perseus")
    p.add_argument("--hooks", default=",".join(HOOKS), help="comma-separated, of " + str(HOOKS))
    p.add_argument("--steps", type=int, default=8)
    return p


def run(args):
    """One record per hook, the same on every rank (checked)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    records = []
    for hook in args.hooks.split(","):
        losses, weights = train(hook, args.steps, rank, world)
        everyone = [None] * world
        dist.all_gather_object(everyone, weights)
        assert all(w == weights for w in everyone), "ranks disagree on the weights: %s" % hook
        records.append({"hook": hook, "world": world, "losses": losses, "weights": weights})
    return records


def main():
    args = parser().parse_args()
    dist.init_process_group(args.backend)
    for record in run(args):
        if dist.get_rank() == 0:
            print(json.dumps(dict(record, backend=args.backend)), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
