"""torch.distributed.checkpoint (DCP): save and load a sharded FSDP2 state dict on the
"perseus" backend.

A plain torch.distributed script: the only Perseus lines are `import perseus.torch` and the
backend name. Trains a few steps, saves model and optimizer shards with `dcp.save`, loads them
into a freshly built (differently initialised) sharded model with `dcp.load`, and checks that
the restored model continues exactly as the original: rank 0 prints one JSON line with both
runs' losses after the checkpoint.

    torchrun --nproc-per-node 2 fsdp2_checkpoint.py --dir /tmp/ckpt
    perseusrun -np 2 python fsdp2_checkpoint.py
"""
import argparse
import json
import shutil
import tempfile

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import perseus.torch  # noqa: F401  (registers the "perseus" backend)


def build(seed, width, mesh):
    torch.manual_seed(seed)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.ReLU()) for _ in range(3)],
                          nn.Linear(width, 4))
    for block in model[:-1]:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2)


def steps(model, optimizer, batches):
    losses = []
    for x, y in batches:
        loss = F.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def parser():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", default="perseus")
    p.add_argument("--dir", default=None, help="checkpoint folder (default: a temporary one)")
    p.add_argument("--width", type=int, default=64)
    return p


def checkpoint_dir(args):
    """The folder every rank writes to: --dir, or one that rank 0 makes (and names to all)."""
    name = [args.dir or (tempfile.mkdtemp(prefix="dcp-") if dist.get_rank() == 0 else None)]
    dist.broadcast_object_list(name, src=0)
    return name[0]


def run(args):
    rank = dist.get_rank()
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    data = torch.Generator().manual_seed(100 + rank)
    batches = [(torch.randn(8, args.width, generator=data), torch.randn(8, 4, generator=data))
               for _ in range(6)]
    model, optimizer = build(0, args.width, mesh)
    before = steps(model, optimizer, batches[:3])
    folder = checkpoint_dir(args)
    model_sd, optim_sd = get_state_dict(model, optimizer)
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=folder)
    original = steps(model, optimizer, batches[3:])

    restored, restored_opt = build(1, args.width, mesh)  # other weights until the load
    model_sd, optim_sd = get_state_dict(restored, restored_opt)
    state = {"model": model_sd, "optim": optim_sd}
    dcp.load(state, checkpoint_id=folder)
    set_state_dict(restored, restored_opt, model_state_dict=state["model"],
                   optim_state_dict=state["optim"])
    resumed = steps(restored, restored_opt, batches[3:])
    dist.barrier()
    if rank == 0 and args.dir is None:
        shutil.rmtree(folder)
    weights = [p.full_tensor().sum().item() for p in restored.parameters()]
    return [{"before": before, "original": original, "resumed": resumed, "weights": weights}]


def main():
    args = parser().parse_args()
    dist.init_process_group(args.backend)
    for record in run(args):
        if dist.get_rank() == 0:
            print(json.dumps(dict(record, backend=args.backend)), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
