"""A worker's side of elastic membership: what perseus.common.elastic.state (the State classes
and the run loop) asks of the launcher. Every function here is called on every rank of the
current membership, from the training thread.

In elastic mode (perseusrun --min-np/--max-np/--host-discovery-script, docs/elastic.md) the
launcher publishes each membership in its rendezvous store under an epoch number; this module
reads this worker's place in it (prepare_init), sees newer ones (host_updates_pending), and
moves from one to the next (reset). The store keys are listed in perseus/rendezvous/elastic.py.

Without elastic mode (the process was not started that way), membership never changes:
host_updates_pending() is False and reset() re-initialises the same job, which fails if a peer
is gone.
"""

import os
import re
import time
import types

from perseus.common import basics, fault_injection
from perseus.common.exceptions import (AuthenticationError, InvalidArgumentError,
                                       PerseusInternalError)
from perseus.common.ops import Max, to_core_op
from perseus.rendezvous import elastic as keys
from perseus.rendezvous.topology import rank_env

_POLL_S = 0.05
_client = None
_epoch = 0  # the epoch of the membership this worker last joined; 0: none yet
_warm_ups = []  # before_ready()'s functions
_unresponsive = ()  # ranks the last failure timed out on (note_failure)
# The ranks that an engine error says did not respond within PERSEUS_TIMEOUT: the shared-memory
# barrier's "... (PERSEUS_TIMEOUT) ... for rank N (local rank" and the channels' "no byte moved
# for ... (PERSEUS_TIMEOUT) on receive from rank N, send to rank M".
_TIMED_OUT_ON = re.compile(r"(?:for|receive from|send to) rank (\d+) \(")


def before_ready(warm_up):
    """Registers `warm_up()`, run by a worker started for a new slot of a running job before it
    tells the launcher it is ready. Note [A new worker warms up before it is ready]: once the
    launcher publishes a new worker, the members stop at their next commit and wait in the
    state sync until the new worker reaches it; one-time work that the new worker's script
    would do between init() and that sync (torch's first optimizer imports torch._dynamo, which
    takes longer than the rest of the join) is better done here, while the members still
    train. A framework registers what its first training step would load anyway."""
    _warm_ups.append(warm_up)


def enabled():
    """True when perseusrun started this process in elastic mode."""
    return os.environ.get("PERSEUS_ELASTIC") == "1"


def epoch():
    """The epoch number of the membership this worker belongs to (0 before the first init, and
    always 0 outside elastic mode)."""
    return _epoch


def _store():
    global _client
    if _client is None:
        _client = basics.core().StoreClient(
            os.environ["PERSEUS_CONTROLLER_ADDR"], int(os.environ["PERSEUS_CONTROLLER_PORT"]),
            os.environ["PERSEUS_SECRET"], 30.0)
    return _client


def _worker_id():
    return os.environ["PERSEUS_ELASTIC_WORKER_ID"]


class LauncherLostError(RuntimeError):
    """perseusrun's store cannot be reached: the launcher is gone, so no membership will come.
    Not a PerseusInternalError: the run loop must not retry it."""


def _read(store, key):
    try:
        return store.get(key)
    except Exception as e:  # noqa: BLE001 (any store failure means the same here)
        raise LauncherLostError(
            "elastic worker %s: perseusrun's rendezvous store is gone (%s); the launcher "
            "exited, so this worker stops" % (os.environ.get("PERSEUS_ELASTIC_WORKER_ID"), e))


def _newest_epoch(store):
    value = _read(store, keys.EPOCH)
    return int(value) if value else 0


def _wait_timeout_s():
    # The driver itself gives up after --elastic-timeout; a worker that outlives it (its
    # launcher gone without a word) must not wait forever.
    return float(os.environ.get("PERSEUS_ELASTIC_TIMEOUT", "600")) + 60.0


def _set_topology(assignment, epoch_number):
    fields = dict(f.split("=", 1) for f in assignment.decode().split())
    # The same variables perseusrun gives a rank of a fixed job.
    os.environ.update(rank_env(types.SimpleNamespace(
        host=fields["host"], **{name: int(fields[name]) for name in (
            "rank", "size", "local_rank", "local_size", "cross_rank", "cross_size")})))
    # Note [Epoch isolation]: store keys, data-plane handshakes and shared-memory names are
    # this epoch's own.
    os.environ["PERSEUS_STORE_PREFIX"] = keys.epoch_prefix(epoch_number)
    os.environ["PERSEUS_JOB_ID"] = "%s-e%d" % (os.environ["PERSEUS_ELASTIC_JOB_ID"],
                                               epoch_number)


def prepare_init():
    """Called by join() (init()) before the core's rendezvous. In elastic mode, waits until the
    launcher has placed this worker in a membership newer than the last one it joined and sets
    the rank variables for it. Raises SystemExit(0) when the launcher ends the job meanwhile
    (the job finished or this worker was left out of it for good), LauncherLostError when the
    launcher is gone, RuntimeError when no membership comes within the elastic timeout."""
    global _epoch
    if not enabled():
        return
    store = _store()
    if _epoch == 0:  # the launcher publishes a new worker once it is ready for a membership
        spare = os.environ.pop(keys.SPARE_ENV, None)
        if spare or int(os.environ.get(keys.FIRST_EPOCH_ENV, "1")) > 1:  # a running job's
            for warm_up in _warm_ups:
                warm_up()
        if spare:
            store.set(keys.ready(spare), b"1")  # warmed up: the driver gives these slots first
            _wait_for_a_slot(store, spare)
        store.set(keys.ready(_worker_id()), b"1")
    me = _worker_id()
    deadline = time.monotonic() + _wait_timeout_s()
    # Not an epoch published before this process started: its worker id may be a former
    # worker's (a slot listed again), with an assignment there that was that worker's.
    after = max(_epoch, int(os.environ.get(keys.FIRST_EPOCH_ENV, "1")) - 1)
    while True:
        if _read(store, keys.STOP) is not None:
            raise SystemExit(0)
        newest = _newest_epoch(store)
        if newest > after:
            assignment = _read(store, keys.assignment(newest, me))
            if assignment is not None:
                _set_topology(assignment, newest)
                store.set(keys.joined(newest, me), b"1")
                _epoch = newest
                return
        if time.monotonic() > deadline:
            raise RuntimeError(
                "elastic worker %s: perseusrun published no membership with this worker for "
                "%.0f s after epoch %d; is perseusrun still running?"
                % (me, _wait_timeout_s(), _epoch))
        time.sleep(_POLL_S)


def _wait_for_a_slot(store, spare):
    """Note [Spare workers]: perseusrun --spare-workers starts processes ahead of need, with no
    slot; each imports, warms up and waits here until the driver gives it the slot of a worker
    it needs (a slot that discovery added), then goes on as a worker started for that slot.
    Raises SystemExit(0) when the job ends first, LauncherLostError when the launcher is
    gone."""
    while True:
        if _read(store, keys.STOP) is not None:
            raise SystemExit(0)
        slot = _read(store, keys.spare(spare))
        if slot is not None:
            wid, first_epoch = slot.decode().split()
            os.environ.update({"PERSEUS_ELASTIC_WORKER_ID": wid,
                               keys.FIRST_EPOCH_ENV: first_epoch})
            return
        time.sleep(_POLL_S)


def host_updates_pending():
    """Collective: True on every rank when the launcher has announced a membership newer than
    the current one (hosts added or removed), False on every rank otherwise. Every rank reads
    the newest epoch and the ranks take the maximum (an allreduce), so they all answer alike
    even when the announcement reaches them at different times (horovod#3494)."""
    if not enabled():
        return False
    import numpy as np
    seen = np.array([_newest_epoch(_store())], dtype=np.int64)  # LauncherLostError: no launcher
    fault_injection.exit_at("negotiation")
    basics.core().allreduce("perseus.elastic.epoch", seen, None, op=to_core_op(Max),
                            blocking=True)
    return int(seen[0]) > _epoch


def note_failure(error):
    """Keeps the ranks that `error` (a failed collective) timed out waiting for, for
    report_failure()."""
    global _unresponsive
    text = str(error)
    _unresponsive = tuple(sorted({int(r) for r in _TIMED_OUT_ON.findall(text)})) if (
        "(PERSEUS_TIMEOUT)" in text) else ()


def report_failure():
    """Tells the launcher that this worker saw the current membership fail (a collective
    raised), so that it publishes the next one even when no process exited (a cut link, a
    hung peer), and which ranks the failure timed out on (note_failure()): the launcher stops
    a member that its peers found unresponsive and that reports nothing itself."""
    global _unresponsive
    if enabled() and _epoch > 0:
        try:
            store = _store()
            store.set(keys.failed_by(_epoch, _worker_id()), b"1")
            for rank in _unresponsive:
                store.add(keys.unresponsive(_epoch, rank), 1)
            store.add(keys.failed(_epoch), 1)
        except Exception:  # noqa: BLE001 (the launcher is gone: reset's wait says so)
            pass
    _unresponsive = ()


def _retried(e):
    """A failure to start a membership that the next membership may not have: a member lost
    during start-up (the launcher aborted the rendezvous), a timeout, a broken connection. A
    wrong argument or secret would fail every membership alike, so it is raised."""
    if isinstance(e, (InvalidArgumentError, AuthenticationError)):
        return False
    return isinstance(e, (PerseusInternalError, TimeoutError, OSError))


def join(start):
    """init()'s join hook (basics.set_join_hook; perseus.common installs it), called with the
    core's start function: prepare_init(), then start(). A membership that fails while it
    starts is left (reported, the core shut down) and the next one is joined, on a worker's
    first membership as on the later ones: a new worker must not exit because a member of the
    membership it was placed in was lost meanwhile (horovod#3264's case, seen from the new
    worker). Outside elastic mode: start() alone."""
    while True:
        prepare_init()
        try:
            start()
            return
        except Exception as e:  # noqa: BLE001 (classified by _retried, else raised)
            if not enabled() or not _retried(e):
                raise
        report_failure()
        basics.shutdown()


def reset():
    """Leaves the current membership (the core is shut down, even with peers gone) and joins
    the next one: on return init() has run again and rank()/size() describe the new job. A
    membership that fails while it starts (a member lost during rendezvous) is left the same
    way and the next one is joined (join())."""
    if enabled():
        report_failure()
    basics.shutdown()
    basics.init()
