"""What the elastic test workers share: their arguments, the pid file the test kills them by,
and the per-worker record file (<results>/<worker id>.json, one JSON object a line)."""

import argparse
import json
import os
import time

from perseus.common.elastic import worker as elastic_worker


def parse(extra=None):
    p = argparse.ArgumentParser()
    p.add_argument("--tag", required=True)
    p.add_argument("--results", required=True)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--step-sleep", type=float, default=0.1)
    if extra:
        extra(p)
    return p.parse_args()


def recorder(results, worker_id=None, fields=None):
    """Writes <results>/pid.<worker id>; returns record(**fields). The worker id is perseusrun's
    (or `worker_id`); `fields()` gives what every record adds besides the worker and the time
    (by default the membership's epoch)."""
    wid = worker_id or os.environ["PERSEUS_ELASTIC_WORKER_ID"]
    with open(os.path.join(results, "pid." + wid), "w") as f:
        f.write(str(os.getpid()))
    out = open(os.path.join(results, wid + ".json"), "a")
    fields = fields or (lambda: {"epoch": elastic_worker.epoch()})

    def record(**r):
        r.update(worker=wid, **fields(), time=time.time())
        out.write(json.dumps(r) + "\n")
        out.flush()
    return record
