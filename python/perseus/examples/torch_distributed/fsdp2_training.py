"""FSDP2 (`fully_shard`) training on the "perseus" backend, and HSDP over a 2-D DeviceMesh.

A plain torch.distributed script: the only Perseus lines are `import perseus.torch` and the
backend name. Each block of an MLP and then the whole model are sharded over the mesh;
`--mesh 2x2` (4 ranks) replicates over the first dimension and shards over the second (HSDP).
Rank 0 prints one JSON line: the global mean loss of every step and the sum of every full
(unsharded) parameter at the end.

    torchrun --nproc-per-node 2 fsdp2_training.py
    torchrun --nproc-per-node 4 fsdp2_training.py --mesh 2x2          # HSDP
    perseusrun -np 2 python fsdp2_training.py
"""
import argparse
import json

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import perseus.torch  # noqa: F401  (registers the "perseus" backend)


def build_model(width, depth):
    torch.manual_seed(0)  # the same full model on every rank before sharding
    blocks = [nn.Sequential(nn.Linear(width, width), nn.ReLU()) for _ in range(depth)]
    return nn.Sequential(*blocks, nn.Linear(width, 4))


def make_mesh(shape):
    dims = tuple(int(d) for d in shape.split("x"))
    names = ("shard",) if len(dims) == 1 else ("replicate", "shard")
    return init_device_mesh("cpu", dims, mesh_dim_names=names)


def shard(model, mesh):
    for block in model[:-1]:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def parser():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", default="perseus")
    p.add_argument("--mesh", default=None, help="'N' (FSDP) or 'RxS' (HSDP); default: world")
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--depth", type=int, default=3)
    p.add_argument("--steps", type=int, default=6)
    return p


def run(args):
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = make_mesh(args.mesh or str(world))
    model = shard(build_model(args.width, args.depth), mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    data = torch.Generator().manual_seed(100 + rank)
    losses = []
    for _ in range(args.steps):
        x = torch.randn(8, args.width, generator=data)
        y = torch.randn(8, 4, generator=data)
        loss = F.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(mean.item() / world)
    weights = [p.full_tensor().sum().item() for p in model.parameters()]
    return [{"mesh": list(mesh.shape), "world": world, "losses": losses, "weights": weights,
             "sharded": [list(p.to_local().shape) for p in model.parameters()]}]


def main():
    args = parser().parse_args()
    dist.init_process_group(args.backend)
    for record in run(args):
        if dist.get_rank() == 0:
            print(json.dumps(dict(record, backend=args.backend)), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
