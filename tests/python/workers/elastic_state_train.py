"""Elastic training with hvd.elastic.TorchState (model, DistributedOptimizer with momentum,
ElasticSampler): the test kills one worker and checks that the others resume from their last
commit and finish with equal weights. One JSON record per event goes to
<results>/<worker id>.json; the worker's pid goes to <results>/pid.<worker id>."""

import argparse
import json
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import perseus.torch as hvd


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--results", required=True)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--step-sleep", type=float, default=0.05)
    p.add_argument("--tag", default="")  # names the job's processes for the leak check
    args = p.parse_args()
    wid = os.environ["PERSEUS_ELASTIC_WORKER_ID"]
    with open(os.path.join(args.results, "pid." + wid), "w") as f:
        f.write(str(os.getpid()))
    out = open(os.path.join(args.results, wid + ".json"), "a")

    def record(**r):
        r.update(worker=wid, rank=hvd.rank(), size=hvd.size(), time=time.time())
        out.write(json.dumps(r) + "\n")
        out.flush()

    hvd.init()
    g = torch.Generator().manual_seed(3)
    data = torch.utils.data.TensorDataset(torch.randn(96, 6, generator=g),
                                          torch.randint(0, 3, (96,), generator=g))
    torch.manual_seed(hvd.rank())  # the first sync makes every rank's model rank 0's
    model = nn.Linear(6, 3)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
                                   named_parameters=model.named_parameters())
    sampler = hvd.elastic.ElasticSampler(data, shuffle=True, seed=1)
    state = hvd.elastic.TorchState(model, opt, sampler=sampler, epoch=0, batch=0)

    def on_reset():
        record(event="reset")
    state.register_reset_callbacks([on_reset])

    @hvd.elastic.run
    def train(state):
        record(event="entry", epoch=state.epoch, batch=state.batch, source=state.sync_root)
        while state.epoch < args.epochs:
            loader = torch.utils.data.DataLoader(data, batch_size=4, sampler=state.sampler)
            for i, (x, y) in enumerate(loader):
                opt.zero_grad()
                F.cross_entropy(model(x), y).backward()
                opt.step()
                state.sampler.record_batch(i, 4)
                state.batch += 1
                record(event="step", epoch=state.epoch, batch=state.batch)
                time.sleep(args.step_sleep)
                if state.batch % 2 == 0:
                    state.commit()
                    record(event="commit", epoch=state.epoch, batch=state.batch)
            state.epoch += 1
            state.sampler.set_epoch(state.epoch)
            state.commit()
            record(event="commit", epoch=state.epoch, batch=state.batch)

    train(state)
    weights = [float(v) for t in model.state_dict().values() for v in t.flatten()]
    record(event="done", epoch=state.epoch, batch=state.batch, weights=weights)
    hvd.shutdown()


if __name__ == "__main__":
    main()
