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
the step's allreduce, so every rank stops after the same step), or at step --steps.

For the soak's per-stage clock of a new worker it also records
  boot    once, when its state is built: when the script started, when its imports were done,
          when init() returned (it had joined a membership) and when the model was built;
  reset   each reset, once the new membership is up and before the state sync."""

import time

STARTED = time.time()  # before the imports: they are one of the stages the soak times

import os  # noqa: E402
import zlib  # noqa: E402

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import perseus.torch as hvd  # noqa: E402
from perseus.common import fault_injection  # noqa: E402

from chaos_common import Arming, Recorder, finishing, parse  # noqa: E402

IMPORTED = time.time()


def checksum(model):
    crc = 0
    for p in model.state_dict().values():
        crc = zlib.crc32(p.detach().contiguous().numpy().tobytes(), crc)
    return crc


def main():
    args = parse()
    hvd.init()
    joined = time.time()
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
    record(event="boot", started=STARTED, imported=IMPORTED, joined=joined, pid=os.getpid())
    state.register_reset_callbacks([lambda: record(event="reset")])

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
            finish = torch.tensor([float(finishing(args, state.step))])
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
