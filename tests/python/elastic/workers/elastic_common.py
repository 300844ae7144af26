"""What the elastic test workers share: their arguments, the pid file the test kills them by,
and the per-worker record file (<results>/<worker id>.json, one JSON object a line)."""

import argparse
import json
import os
import time

from perseus.common import elastic_worker


def parse(extra=None):
    p = argparse.ArgumentParser()
    p.add_argument("--tag", required=True)
    p.add_argument("--results", required=True)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--step-sleep", type=float, default=0.1)
    if extra:
        extra(p)
    return p.parse_args()


def recorder(results):
    """Writes <results>/pid.<worker id>; returns record(**fields)."""
    wid = os.environ["PERSEUS_ELASTIC_WORKER_ID"]
    with open(os.path.join(results, "pid." + wid), "w") as f:
        f.write(str(os.getpid()))
    out = open(os.path.join(results, wid + ".json"), "a")

    def record(**r):
        r.update(worker=wid, epoch=elastic_worker.epoch(), time=time.time())
        out.write(json.dumps(r) + "\n")
        out.flush()
    return record
