"""horovod#2652's worker (test_elastic_joining.py): the ranks broadcast a large state from rank
0, back to back, so that a new membership is announced while a broadcast is in flight; a new
worker receives the same state by broadcast when it joins.

The state is `--mib` MiB of float32 whose values are a function of the step, so every receiver
checks what it got. Host updates are checked every `--check-every` steps, so that broadcasts
fill most of the time. Around each broadcast the worker reads the newest epoch from the store:
`announced_during` in its record is true when the new membership was published while that
broadcast ran. The job ends when the test creates the finish file: rank 0 broadcasts the flag
with the state, so every rank stops after the same step."""

import os
import time

import numpy as np

from perseus.common import basics
from perseus.common.elastic import worker as elastic_worker
from perseus.common.exceptions import PerseusInternalError
from perseus.rendezvous import elastic as keys

import elastic_common

MAX = 3  # perseus_reduce_op


def _flags(p):
    p.add_argument("--mib", type=int, default=64)
    p.add_argument("--finish-file", required=True,
                   help="the job ends after the step in which rank 0 sees this file")
    p.add_argument("--check-every", type=int, default=4,
                   help="steps between host update checks (a commit every few batches)")


def state_for(step, n):
    return (np.arange(n, dtype=np.float32) % 4093) + np.float32(step)


def newest_epoch():
    value = elastic_worker._store().get(keys.EPOCH)  # the launcher's announcement, unsynced
    return int(value) if value else 0


def main():
    args = elastic_common.parse(_flags)
    record = elastic_common.recorder(args.results)
    n = args.mib << 18  # float32 elements

    c = basics.core()
    basics.init()
    step = 0
    state = np.zeros(n + 1, dtype=np.float32)  # the data, then the finish flag
    data = state[:n]
    synced = False
    while True:
        try:
            if not synced:
                # The state sync after a reset: the survivors' step and state, by broadcast.
                s = np.array([step], dtype=np.int64)
                c.allreduce("bcast.step", s, None, op=MAX, blocking=True)
                step = int(s[0])
                if basics.rank() == 0:
                    data[:] = state_for(step, n)
                    state[n] = 0
                c.broadcast("bcast.sync", state, None, 0, blocking=True)
                ok = bool(np.array_equal(data, state_for(step, n)))
                record(event="joined", rank=basics.rank(), size=basics.size(), step=step,
                       state_ok=ok)
                assert ok, "the synced state is not step %d's" % step
                synced = True
            if step >= args.steps:
                break
            if step % args.check_every == 0 and elastic_worker.host_updates_pending():
                record(event="hosts_updated", step=step)
                elastic_worker.reset()
                synced = False
                continue
            if basics.rank() == 0:
                data += 1  # state_for(step + 1, n): every rank holds state_for(step, n)
                state[n] = os.path.exists(args.finish_file)
            before, began = newest_epoch(), time.monotonic()
            c.broadcast("bcast.state", state, None, 0, blocking=True)
            took, after = time.monotonic() - began, newest_epoch()
            step += 1
            ok = bool(data[0] == step and data[-1] == (n - 1) % 4093 + step)
            record(event="step", rank=basics.rank(), size=basics.size(), step=step,
                   state_ok=ok, announced_during=after > before, bcast_s=round(took, 4))
            assert ok, "step %d: broadcast state %s" % (step, data[:2])
            if state[n]:
                break
        except PerseusInternalError as e:
            record(event="failed", step=step, error=str(e)[:300])
            elastic_worker.reset()
            synced = False
    record(event="done", rank=basics.rank(), size=basics.size(), step=step)
    basics.shutdown()


if __name__ == "__main__":
    main()
