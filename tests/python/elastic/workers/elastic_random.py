"""The worker of the randomised elastic test (test_elastic_random.py): elastic_loop.py's loop
over elastic_worker and the core, whose every step says who took part in it.

Each step allreduces (SUM) a vector holding a one-hot of this worker's slot, a one-hot of its
rank and a finish flag. The sum names the membership the step ran in: the test checks the
slots against the membership perseusrun published for the epoch, and the worker itself checks
that the ranks are 0..size-1, each once. The job ends when the test creates the finish file:
the flag is part of the same sum, so every rank stops after the same step."""

import os
import time

import numpy as np

from perseus.common import basics
from perseus.common.elastic import worker as elastic_worker
from perseus.common.exceptions import PerseusInternalError

import elastic_common

SUM, MAX = 0, 3  # perseus_reduce_op
SLOTS = 64  # slots a run may use on its host (the test adds one per growth event)


def _flags(p):
    p.add_argument("--finish-file", required=True)


def main():
    args = elastic_common.parse(_flags)
    wid = os.environ["PERSEUS_ELASTIC_WORKER_ID"]
    slot = int(wid.rsplit(":", 1)[1])
    assert slot < SLOTS, "slot %d: the test may use %d slots a run" % (slot, SLOTS)
    record = elastic_common.recorder(args.results)

    c = basics.core()
    basics.init()
    step = 0
    synced = False
    while True:
        try:
            if not synced:
                s = np.array([step], dtype=np.int64)
                c.allreduce("random.step", s, None, op=MAX, blocking=True)
                step = int(s[0])
                synced = True
                record(event="joined", rank=basics.rank(), size=basics.size(), step=step)
            if elastic_worker.host_updates_pending():
                record(event="hosts_updated", step=step)
                elastic_worker.reset()
                synced = False
                continue
            rank, size = basics.rank(), basics.size()
            x = np.zeros(2 * SLOTS + 1, dtype=np.int32)
            x[slot] = 1
            x[SLOTS + rank] = 1
            x[2 * SLOTS] = int(os.path.exists(args.finish_file))
            c.allreduce("random.members", x, None, op=SUM, blocking=True)
            ranks = x[SLOTS:2 * SLOTS]
            assert (ranks[:size] == 1).all() and not ranks[size:].any(), (
                "epoch %d, size %d: rank counts %s" % (elastic_worker.epoch(), size,
                                                       ranks.tolist()))
            step += 1
            record(event="step", rank=rank, size=size, step=step,
                   slots=[int(i) for i in np.nonzero(x[:SLOTS])[0]],
                   slot_counts=sorted(set(int(v) for v in x[:SLOTS] if v)))
            if x[2 * SLOTS]:
                break
            time.sleep(args.step_sleep)
        except PerseusInternalError as e:
            record(event="failed", step=step, error=str(e)[:300])
            elastic_worker.reset()
            synced = False
    record(event="done", rank=basics.rank(), size=basics.size(), step=step)
    basics.shutdown()


if __name__ == "__main__":
    main()
