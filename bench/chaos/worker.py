"""The chaos soak's training worker (bench/chaos/soak.py): a small MLP trained under
hvd.elastic.run with a TorchState, a commit every --commit-every steps, and every other step a
large allreduce (the target of the `allreduce` phase).

It records what the soak measures, one JSON object a line in <results>/<worker id>.json:
  entry   each entry into the training function (after every reset and sync): the step it
          resumes from and whether every rank's parameter checksum equals (an allgather);
  step    each completed step (the step's allreduce took every member);
  commit  each commit that returned (every member had saved that step).

The soak aims a fault at a phase by writing <results>/arm.<worker id> ("<phase> [<steps>]"):
the worker sets PERSEUS_TEST_EXIT_AT to it (perseus.common.fault_injection) for that many
steps (--arm-steps by default).
The job ends after the step in which any rank sees the --finish-file (the flag is summed by
the step's allreduce, so every rank stops after the same step), or at step --steps."""

import argparse
import json
import os
import time
import zlib

import torch
import torch.nn as nn
import torch.nn.functional as F

import perseus.torch as hvd
from perseus.common import elastic_worker, fault_injection


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--results", required=True)
    p.add_argument("--tag", default="")  # names the job's processes for the leftover check
    p.add_argument("--finish-file", required=True)
    p.add_argument("--commit-every", type=int, default=5)
    p.add_argument("--step-sleep", type=float, default=0.05)
    p.add_argument("--big-elements", type=int, default=1 << 20)
    p.add_argument("--arm-steps", type=int, default=40)
    p.add_argument("--steps", type=int, default=0,
                   help="also finish at this step (0: only at the finish file)")
    return p.parse_args()


class Recorder:
    def __init__(self, results, wid):
        self.out = open(os.path.join(results, wid + ".json"), "a")
        self.wid = wid
        with open(os.path.join(results, "pid." + wid), "w") as f:
            f.write(str(os.getpid()))

    def __call__(self, **r):
        r.update(worker=self.wid, epoch=elastic_worker.epoch(), time=time.time())
        self.out.write(json.dumps(r) + "\n")
        self.out.flush()


class Arming:
    """Reads the soak's arm file and keeps PERSEUS_TEST_EXIT_AT set for a bounded number of
    steps (an armed phase that never comes, e.g. no reset follows, must not fire much later
    in an unrelated fault)."""

    def __init__(self, results, wid, steps):
        self.path = os.path.join(results, "arm." + wid)
        self.steps = steps
        self.left = 0

    def tick(self, record):
        if os.path.exists(self.path):
            with open(self.path) as f:
                phase, _, steps = f.read().strip().partition(" ")
            os.unlink(self.path)
            os.environ["PERSEUS_TEST_EXIT_AT"] = phase
            self.left = int(steps) if steps else self.steps
            record(event="armed", phase=phase)
        elif self.left:
            self.left -= 1
            if not self.left:
                os.environ.pop("PERSEUS_TEST_EXIT_AT", None)
                record(event="disarmed")


def checksum(model):
    crc = 0
    for p in model.state_dict().values():
        crc = zlib.crc32(p.detach().contiguous().numpy().tobytes(), crc)
    return crc


def main():
    args = parse()
    hvd.init()
    wid = os.environ["PERSEUS_ELASTIC_WORKER_ID"]
    record = Recorder(args.results, wid)
    arming = Arming(args.results, wid, args.arm_steps)

    torch.manual_seed(1 + hvd.rank())  # differs per rank: the first sync makes them equal
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                          nn.Linear(64, 8))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9),
                                   named_parameters=model.named_parameters())
    state = hvd.elastic.TorchState(model, opt, step=0)
    big = torch.zeros(args.big_elements)

    @hvd.elastic.run
    def train(state):
        sums = hvd.allgather(torch.tensor([checksum(model)], dtype=torch.int64),
                             name="chaos.checksum")
        record(event="entry", step=state.step, rank=hvd.rank(), size=hvd.size(),
               equal=bool((sums == sums[0]).all()), sync_root=state.sync_root,
               job=os.environ.get("PERSEUS_ELASTIC_JOB_ID"))
        while True:
            arming.tick(record)
            g = torch.Generator().manual_seed(state.step * 1000 + hvd.rank())
            x = torch.randn(16, 32, generator=g)
            y = torch.randint(0, 8, (16,), generator=g)
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
            if state.step % 2 == 0:
                handle = hvd.allreduce_async_(big, name="chaos.big")
                fault_injection.exit_at("allreduce")
                hvd.synchronize(handle)
            finish = torch.tensor([float(os.path.exists(args.finish_file) or
                                         0 < args.steps <= state.step + 1)])
            finish = hvd.allreduce(finish, name="chaos.finish", op=hvd.Sum)
            state.step += 1
            record(event="step", step=state.step, rank=hvd.rank(), size=hvd.size())
            if finish.item():
                return
            if state.step % args.commit_every == 0:
                state.commit()
                record(event="commit", step=state.step)
            time.sleep(args.step_sleep)

    train(state)
    record(event="done", step=state.step, rank=hvd.rank(), size=hvd.size())
    hvd.shutdown()


if __name__ == "__main__":
    main()
