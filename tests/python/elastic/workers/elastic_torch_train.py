"""Deterministic elastic training with hvd.elastic.TorchState (test_elastic_training.py): a
linear model, SGD with momentum through DistributedOptimizer, a fixed data set split by
ElasticSampler, a commit every other batch and at each epoch's end.

Everything a step computes follows from the data, the sampler's split (rank, size and the
processed count) and the state: two runs that apply the same sizes from the same commits
compute the same losses and weights, bit for bit. The same script is the elastic run (under
perseusrun's elastic mode) and the two halves of its reference (fixed jobs): `--stop-at
EPOCH:BATCH` ends the run after that commit and writes the committed state to `--save`;
`--load` starts from such a file.

Records (<results>/<worker id or rank>.json): entry (each entry into the run function, with the
batch it resumes from), step (with this rank's loss), commit, reset, done (the weights)."""

import argparse
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import perseus.torch as hvd

import elastic_common

BATCH = 4  # per rank


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--results", required=True)
    p.add_argument("--tag", default="")  # names the job's processes for the leak check
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--step-sleep", type=float, default=0.05)
    p.add_argument("--stop-at", default="", metavar="EPOCH:BATCH")
    p.add_argument("--save", default="")
    p.add_argument("--load", default="")
    args = p.parse_args()

    hvd.init()
    # A fixed reference job has no worker ids: its records go by rank.
    record = elastic_common.recorder(
        args.results, os.environ.get("PERSEUS_ELASTIC_WORKER_ID") or "rank%d" % hvd.rank(),
        lambda: {"rank": hvd.rank(), "size": hvd.size()})

    g = torch.Generator().manual_seed(5)
    data = torch.utils.data.TensorDataset(torch.randn(384, 8, generator=g),
                                          torch.randint(0, 4, (384,), generator=g))
    torch.manual_seed(1 + hvd.rank())  # differs per rank: the first sync makes them rank 0's
    model = nn.Linear(8, 4)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
                                   named_parameters=model.named_parameters())
    sampler = hvd.elastic.ElasticSampler(data, shuffle=True, seed=2)
    state = hvd.elastic.TorchState(model, opt, sampler=sampler, epoch=0, batch=0)
    if args.load:
        saved = torch.load(args.load)
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["optimizer"])
        sampler.load_state_dict(saved["sampler"])
        state.epoch, state.batch = saved["epoch"], saved["batch"]
        state.save()
    state.register_reset_callbacks([lambda: record(event="reset")])

    def committed():
        state.commit()
        record(event="commit", epoch=state.epoch, batch=state.batch)
        if args.stop_at == "%d:%d" % (state.epoch, state.batch):
            if hvd.rank() == 0:
                torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                            "sampler": sampler.state_dict(), "epoch": state.epoch,
                            "batch": state.batch}, args.save)
            return True
        return False

    @hvd.elastic.run
    def train(state):
        record(event="entry", epoch=state.epoch, batch=state.batch, source=state.sync_root)
        while state.epoch < args.epochs:
            loader = torch.utils.data.DataLoader(data, batch_size=BATCH, sampler=state.sampler)
            for i, (x, y) in enumerate(loader):
                opt.zero_grad()
                loss = F.cross_entropy(model(x), y)
                loss.backward()
                opt.step()
                state.sampler.record_batch(i, BATCH)
                state.batch += 1
                record(event="step", epoch=state.epoch, batch=state.batch, loss=loss.item())
                time.sleep(args.step_sleep)
                if state.batch % 2 == 0 and committed():
                    return
            state.epoch += 1
            state.sampler.set_epoch(state.epoch)
            if committed():
                return

    train(state)
    weights = [float(v) for t in model.state_dict().values() for v in t.flatten()]
    record(event="done", epoch=state.epoch, batch=state.batch, weights=weights)
    hvd.shutdown()


if __name__ == "__main__":
    main()
