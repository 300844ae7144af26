"""Picklable Python objects between ranks on the "perseus" backend: all_gather_object,
broadcast_object_list, gather_object and scatter_object_list.

A plain torch.distributed script: the only Perseus lines are `import perseus.torch` and the
backend name. Each rank contributes an object of its own (different sizes, nested types, a
tensor inside); rank 0 prints one JSON line with what every call returned on every rank.

    torchrun --nproc-per-node 2 object_collectives.py
    perseusrun -np 2 python object_collectives.py
"""
import argparse
import json

import torch
import torch.distributed as dist

import perseus.torch  # noqa: F401  (registers the "perseus" backend)


def contribution(rank):
    """Differs in size per rank, so that the pickles' lengths differ too."""
    return {"rank": rank, "name": "worker-%d" % rank, "tags": ["x"] * (1 + 3 * rank),
            "tensor": torch.arange(2 + rank, dtype=torch.float64)}


def plain(obj):
    """JSON-friendly copy (tensors as lists)."""
    if isinstance(obj, torch.Tensor):
        return obj.tolist()
    if isinstance(obj, dict):
        return {k: plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    return obj


def run_calls(rank, world):
    gathered = [None] * world
    dist.all_gather_object(gathered, contribution(rank))

    config = [{"lr": 0.1, "schedule": list(range(5))}, "from-%d" % rank, None]
    dist.broadcast_object_list(config, src=world - 1)  # the last rank's list everywhere

    at_root = [None] * world if rank == 0 else None
    dist.gather_object(("hello", rank), at_root, dst=0)

    received = [None]
    dist.scatter_object_list(received, [{"for": r} for r in range(world)] if rank == 0 else None,
                             src=0)
    return {"all_gather_object": gathered, "broadcast_object_list": config,
            "gather_object": at_root, "scatter_object_list": received}


def parser():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", default="perseus")
    return p


def run(args):
    rank, world = dist.get_rank(), dist.get_world_size()
    everyone = [None] * world
    dist.all_gather_object(everyone, plain(run_calls(rank, world)))
    return [{"world": world, "per_rank": everyone}]


def main():
    args = parser().parse_args()
    dist.init_process_group(args.backend)
    for record in run(args):
        if dist.get_rank() == 0:
            print(json.dumps(dict(record, backend=args.backend)), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
