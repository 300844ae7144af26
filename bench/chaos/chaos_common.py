"""What the chaos soak's workers (worker.py for torch, worker_mx.py for MXNet) share: their
arguments, the record file the soak reads, and the arming of the fault-injection hook."""

import argparse
import json
import os
import time

from perseus.common.elastic import worker as elastic_worker


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
            self.left = int(steps) if steps else self.steps
            if not self.left:  # "<phase> 0": the soak gave up waiting for the phase
                os.environ.pop("PERSEUS_TEST_EXIT_AT", None)
                record(event="disarmed")
                return
            os.environ["PERSEUS_TEST_EXIT_AT"] = phase
            record(event="armed", phase=phase)
        elif self.left:
            self.left -= 1
            if not self.left:
                os.environ.pop("PERSEUS_TEST_EXIT_AT", None)
                record(event="disarmed")


def finishing(args, step):
    """This rank's vote to end after the step that `step` is the count before: the finish
    file exists or --steps is reached. The votes are summed by the step's allreduce."""
    return os.path.exists(args.finish_file) or 0 < args.steps <= step + 1
