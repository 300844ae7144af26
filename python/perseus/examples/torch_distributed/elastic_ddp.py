"""Elastic DDP on the "perseus" backend: a rank is lost and the survivors go on, in the same
processes, from the last in-memory commit; no relaunch, no checkpoint file.

    perseusrun -np 3 --min-np 2 -H localhost:3 python elastic_ddp.py --kill-rank 1 --kill-at 7

The training loop is torch.distributed's (DDP over init_process_group("perseus")); Perseus's
elastic layer (as in Horovod's elastic API) keeps the state and re-forms the job:
- TorchState holds the model, optimizer and step; state.commit() copies them to memory;
- when a rank is lost, every survivor's pending collective fails with a Perseus error (it names
  the rank and the operation) within the group timeout; hvd.elastic.run then restores the last
  commit, waits for perseusrun's next membership (the survivors, renumbered), and calls the
  reset callback below, which rebuilds the process group and re-wraps the model in DDP;
- the state is synced from a survivor holding the newest commit, and the loop goes on.
Every rank prints one JSON line per step (`"event": "step"`) and one at the end.
"""
import argparse
import json
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import perseus.torch as hvd  # registers the "perseus" backend; its elastic layer keeps state


def say(**record):
    print(json.dumps(dict(record, rank=dist.get_rank(), world=dist.get_world_size())),
          flush=True)


class Trainer:
    def __init__(self, args):
        self.args = args
        torch.manual_seed(0)
        self.model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.05)
        self.state = hvd.elastic.TorchState(model=self.model, optimizer=self.optimizer, step=0)
        self.state.register_reset_callbacks([self.rebuild])
        self.start_group()

    def start_group(self):
        # perseus://: the ranks of the current membership, as perseusrun published it.
        dist.init_process_group("perseus", init_method="perseus://")
        self.ddp = DDP(self.model)

    def rebuild(self):
        """After a membership change: the old group is gone with its members; form the new
        one and wrap the (restored) model again."""
        dist.destroy_process_group()
        self.start_group()
        say(event="rebuilt", step=self.state.step)

    def batch(self, step):
        g = torch.Generator().manual_seed(1000 * step + dist.get_rank())
        return torch.randn(8, 16, generator=g), torch.randn(8, 1, generator=g)

    def train(self, state):
        args = self.args
        while state.step < args.steps:
            if (state.step == args.kill_at and dist.get_rank() == args.kill_rank
                    and dist.get_world_size() == args.start_np):
                os._exit(1)  # the lost rank: no goodbye, as a crash
            x, y = self.batch(state.step)
            loss = F.mse_loss(self.ddp(x), y)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            state.step += 1
            say(event="step", step=state.step, loss=loss.item())
            if state.step % args.commit_every == 0:
                state.commit()


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--commit-every", type=int, default=4)
    p.add_argument("--kill-rank", type=int, default=-1, help="rank that exits, -1: none")
    p.add_argument("--kill-at", type=int, default=7, help="step at which it exits")
    p.add_argument("--start-np", type=int, default=3, help="world size it exits from")
    args = p.parse_args()
    hvd.init()  # joins perseusrun's first membership
    trainer = Trainer(args)
    hvd.elastic.run(trainer.train)(trainer.state)
    say(event="done", step=trainer.state.step,
        weights=[p.detach().sum().item() for p in trainer.model.parameters()])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
