"""A minimal elastic worker over perseus.common.elastic.worker and the core alone (no State
layer): an allreduce loop that leaves a failed membership with reset(), joins a newer one when
host_updates_pending() says so, and carries its step across memberships (the maximum over the
members, so that a newcomer takes the others' step).

Each worker appends one JSON record per step to <results>/<worker id>.json and writes its pid
to <results>/pid.<worker id>, so that the test can kill it."""

import os
import signal
import time

import numpy as np

from perseus.common import basics
from perseus.common.elastic import worker as elastic_worker
from perseus.common.exceptions import PerseusInternalError
from perseus.common.process_sets import add_process_set
from perseus.rendezvous import elastic as keys

import elastic_common

SUM, MAX = 0, 3  # perseus_reduce_op


def _flags(p):
    p.add_argument("--process-set", action="store_true",
                   help="each membership registers the set {0, 1} and reduces over it too")
    p.add_argument("--exit-on-failure", default="",
                   help="this worker id exits (code 3) 1 s after its first failure instead of "
                        "resetting: a member lost while the next membership starts")
    p.add_argument("--exit-on-update", default="", metavar="WORKER:NEWCOMER",
                   help="WORKER exits (code 3) when a new membership is announced, once "
                        "NEWCOMER has joined it: a member lost while a new worker starts")
    p.add_argument("--stop-on-update", default="", metavar="WORKER",
                   help="WORKER stops itself (SIGSTOP) when a new membership is announced: "
                        "a member hung while the others meet in the next rendezvous")
    p.add_argument("--start-delay", default="", metavar="WORKER:SECONDS",
                   help="WORKER sleeps SECONDS before init(): a newcomer slow to start")


def _exit_once_joined(newcomer):
    """Waits until `newcomer` has joined the newest membership (it is in its rendezvous,
    waiting for this worker among others), then exits."""
    store = elastic_worker._store()
    newest = int(store.get(keys.EPOCH))
    deadline = time.monotonic() + 60
    while store.get(keys.joined(newest, newcomer)) is None and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.5)
    os._exit(3)


def main():
    args = elastic_common.parse(_flags)
    # A spare (perseusrun --spare-workers) has no worker id until init() gives it a slot.
    wid = os.environ.get("PERSEUS_ELASTIC_WORKER_ID")
    record = elastic_common.recorder(args.results) if wid else None

    if wid and args.start_delay.startswith(wid + ":"):
        time.sleep(float(args.start_delay[len(wid) + 1:]))
    c = basics.core()
    basics.init()
    record = record or elastic_common.recorder(args.results)
    wid = os.environ["PERSEUS_ELASTIC_WORKER_ID"]
    step = 0
    synced = False
    pair = None
    while True:
        try:
            if not synced:
                s = np.array([step], dtype=np.int64)
                c.allreduce("loop.step", s, None, op=MAX, blocking=True)
                step = int(s[0])
                synced = True
                record(event="joined", rank=basics.rank(), size=basics.size(), step=step)
                if args.process_set and basics.size() >= 3:
                    # The sets of the last membership were dropped by its shutdown.
                    pair = add_process_set([0, 1])
            if step >= args.steps:
                break
            if elastic_worker.host_updates_pending():
                record(event="hosts_updated", step=step)
                if args.exit_on_update.startswith(wid + ":"):
                    _exit_once_joined(args.exit_on_update[len(wid) + 1:])
                if args.stop_on_update == wid:
                    record(event="stopping", step=step)
                    os.kill(os.getpid(), signal.SIGSTOP)
                pair = None
                elastic_worker.reset()
                synced = False
                continue
            x = np.ones(8, dtype=np.float32)
            c.allreduce("loop.grad", x, None, op=SUM, blocking=True)
            assert float(x[0]) == basics.size(), (float(x[0]), basics.size())
            if pair is not None and pair.included():
                y = np.ones(2, dtype=np.float32)
                c.allreduce("loop.pair", y, None, op=SUM, process_set=pair.process_set_id,
                            blocking=True)
                assert float(y[0]) == 2.0, float(y[0])
            step += 1
            record(event="step", rank=basics.rank(), size=basics.size(), step=step)
            time.sleep(args.step_sleep)
        except PerseusInternalError as e:
            record(event="failed", step=step, error=str(e)[:300])
            if args.exit_on_failure == wid:
                time.sleep(1.0)
                os._exit(3)
            pair = None
            elastic_worker.note_failure(e)  # the ranks it timed out on, for the launcher
            elastic_worker.reset()
            synced = False
    record(event="done", rank=basics.rank(), size=basics.size(), step=step)
    basics.shutdown()


if __name__ == "__main__":
    main()
