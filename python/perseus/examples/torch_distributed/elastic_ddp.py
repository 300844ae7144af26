"""Elastic DDP on the "perseus" backend: a rank is lost and the survivors go on, in the same
processes, from the last in-memory commit; no relaunch, no checkpoint file.

Two ways to re-form the group, chosen by how the job was started:
- dist.shrink_group (torch releases that have it and can build a Python c10d Backend), for
  ranks started by anything that leaves the survivors running when one dies (torchrun and
  perseusrun without elastic mode stop them all), here by hand:

    for r in 0 1 2; do RANK=$r WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 \\
        python elastic_ddp.py --kill-rank 2 --kill-at 7 & done; wait

  torch's store lives in rank 0's process there, so the lost rank must not be rank 0.
- perseusrun's elastic mode, on any torch, which can also add ranks later:

    perseusrun -np 3 --min-np 2 -H localhost:3 python elastic_ddp.py --kill-rank 1 --kill-at 7

The training loop is torch.distributed's (DDP over init_process_group("perseus")); Perseus's
elastic layer (as in Horovod's elastic API) keeps the state and runs the loop:
- TorchState holds the model, optimizer and step; state.commit() copies them to memory;
- when a rank is lost, every survivor's pending collective fails with a Perseus error (it names
  the rank and the operation) within the group timeout; hvd.elastic.run restores the last
  commit and calls its reset: with shrink_group, the survivors agree through torch's store on
  who is still here and shrink the default group to them; in elastic mode, the reset waits for
  perseusrun's next membership (the survivors, renumbered) and the group is made again;
- the reset callback re-wraps the (restored) model in DDP, the state is synced from a survivor
  holding the newest commit, and the loop goes on.
Every rank prints one JSON line per step (`"event": "step"`) and one at the end.
"""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import perseus.torch as hvd  # registers the "perseus" backend; its elastic layer keeps state
from perseus.torch.distributed import python_backends_supported


def say(**record):
    print(json.dumps(dict(record, rank=dist.get_rank(), world=dist.get_world_size())),
          flush=True)


def shrink_available():
    return (hasattr(dist, "shrink_group") and python_backends_supported()
            and os.environ.get("PERSEUS_ELASTIC") != "1")


class Trainer:
    def __init__(self, args):
        self.args = args
        self.generation = 0  # how many times the group was re-formed
        torch.manual_seed(0)
        self.model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.05)
        self.state = hvd.elastic.TorchState(model=self.model, optimizer=self.optimizer, step=0)
        self.state.register_reset_callbacks([self.rewrap])
        self.start_group()

    def start_group(self):
        if shrink_available():
            dist.init_process_group("perseus")  # RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
        else:  # perseus://: the ranks of the current membership, as perseusrun published it
            dist.init_process_group("perseus", init_method="perseus://")
        self.ddp = DDP(self.model)

    def rewrap(self):
        """After the group was re-formed: wrap the (restored) model again. In elastic mode the
        old group is gone with its members, so it is made again first."""
        self.generation += 1
        if not shrink_available():
            dist.destroy_process_group()
            self.start_group()
        else:
            self.ddp = DDP(self.model)
        say(event="rebuilt", step=self.state.step)

    def lost_ranks(self):
        """The ranks of the current group that did not report here within --settle seconds,
        as every survivor sees them: the first survivor to decide writes the list to torch's
        store and the others take it. A survivor that reports after that is left out too."""
        store = dist.distributed_c10d._get_default_store()
        key = "elastic_ddp/%d/" % self.generation
        rank, size = dist.get_rank(), dist.get_world_size()
        store.set(key + str(rank), "here")
        store.add(key + "count", 1)
        deadline = time.monotonic() + self.args.settle
        while store.add(key + "count", 0) < size and time.monotonic() < deadline:
            time.sleep(0.05)
        here = [r for r in range(size) if store.check([key + str(r)])]
        here = json.loads(store.compare_set(key + "decided", "", json.dumps(here)))
        if rank not in here:
            raise SystemExit("rank %d reported after the others went on without it" % rank)
        return [r for r in range(size) if r not in here]

    def shrink(self):
        """hvd.elastic.run's reset with shrink_group: the group goes on with the ranks here.
        This rank's engine stops first: one that stopped on an error still holds its
        connections until then, and the other survivors' engines may be waiting on them."""
        hvd.shutdown()
        dist.shrink_group(self.lost_ranks())

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
    p.add_argument("--settle", type=float, default=2.0,
                   help="shrink_group: seconds the survivors wait for each other")
    args = p.parse_args()
    if not shrink_available():
        hvd.init()  # joins perseusrun's first membership
    trainer = Trainer(args)
    reset = trainer.shrink if shrink_available() else None  # None: perseusrun's membership
    hvd.elastic.run_fn(trainer.train, reset)(trainer.state)
    total = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(total)  # a collective on the group the job ended with
    say(event="done", step=trainer.state.step, total=total.item(),
        weights=[p.detach().sum().item() for p in trainer.model.parameters()])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
