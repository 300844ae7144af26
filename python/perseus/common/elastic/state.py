"""Horovod 0.28's horovod.common.elastic: State, ObjectState and the run loop, over
perseus.common.elastic.worker (the launcher's membership) and perseus.common.elastic.sync (the
collective sync decision).

Contract: a State and the function run() wraps belong to the training thread; every method that
syncs or checks for host updates is collective over the current membership.

Where Perseus differs from Horovod: after a reset, whether to sync and from which rank is agreed
by every rank (elastic_sync.agree): a sync happens when any rank needs one (a new worker, a rank
that restored after an error) or the ranks' commit counters differ, and the state comes from the
lowest rank holding the newest commit, not from rank 0 whatever it holds.
"""

import functools

from perseus.common import basics, fault_injection
from perseus.common.elastic import sync as elastic_sync
from perseus.common.elastic import worker as elastic_worker
from perseus.common import objects as _objects
from perseus.common.exceptions import (  # noqa: F401  (Horovod's names, from here too)
    AuthenticationError, HorovodInternalError, HostsUpdatedInterrupt, InvalidArgumentError,
    NotInitializedError, PerseusInternalError)

# Errors that a reset cannot cure (an argument is wrong, init() was never called, the secret
# differs): run() lets them through instead of retrying the same failure forever.
_NOT_RETRIED = (InvalidArgumentError, NotInitializedError, AuthenticationError)


class State:
    """In-memory training state kept consistent across workers.

    bcast_object(obj, root_rank=...) broadcasts a picklable object; get_rank() is this
    worker's rank. Subclasses implement save(), restore() and sync(); a sync that calls
    self._bcast_object(obj) without a root broadcasts from the source agreed for this sync.
    """

    def __init__(self, bcast_object=None, get_rank=None):
        self._broadcast = bcast_object or _objects.broadcast_object
        self._rank = get_rank or basics.rank
        self._reset_callbacks = []
        self._commits = elastic_sync.NO_STATE
        self._sync_root = 0

    def _bcast_object(self, obj, root_rank=None, **kwargs):
        return self._broadcast(obj, root_rank=self._sync_root if root_rank is None else root_rank,
                               **kwargs)

    @property
    def sync_root(self):
        """The rank that the last (or current) sync took the state from."""
        return self._sync_root

    def register_reset_callbacks(self, callbacks):
        """Adds functions called after every reset (a worker added or removed, or a failure),
        once the new membership is up and before the state is synced: rescaling the learning
        rate to the new size() is the usual one."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def commit(self):
        """save(), then check_host_updates(). Commits are copies (from the GPU, for device
        state): committing every few batches trades the steps lost in a failure against the
        copy time."""
        self.save()
        self._commits = max(self._commits, 0) + 1
        fault_injection.exit_at("commit")
        self.check_host_updates()

    def check_host_updates(self):
        """Collective: raises HostsUpdatedInterrupt on every rank alike when the launcher has
        announced a new membership (hosts added or removed)."""
        if elastic_worker.host_updates_pending():
            fault_injection.exit_at("join")
            # skip_sync: this rank's state is current (every rank stopped at this same call);
            # a sync still happens if a new worker or any other rank asks for one.
            raise HostsUpdatedInterrupt(skip_sync=True)

    def save(self):
        """Copies the state to host memory."""
        raise NotImplementedError()

    def restore(self):
        """Goes back to the last committed state, undoing uncommitted changes."""
        raise NotImplementedError()

    def sync(self):
        """Collective: makes every worker's state equal to the sync source's."""
        raise NotImplementedError()

    def reset(self):
        """Called after a reset, before the sync: rebuild what depends on rank() or size()."""

    def _agree_and_sync(self, need):
        """Collective: the reset protocol's sync step (see the module docstring)."""
        do_sync, source, newest = elastic_sync.agree(self._commits, need)
        if do_sync:
            self._sync_root = source
            fault_injection.exit_at("broadcast")
            self.sync()
            self._commits = max(newest, 0)


class ObjectState(State):
    """State made of picklable Python objects, one per keyword argument, each exposed as an
    attribute. save() copies the attributes' current values; sync() broadcasts the saved
    values from the source and sets them as the attributes on every worker."""

    def __init__(self, bcast_object=None, get_rank=None, **kwargs):
        super().__init__(bcast_object=bcast_object, get_rank=get_rank)
        self._saved_state = kwargs
        self._set_attrs()

    def save(self):
        self._saved_state = {attr: getattr(self, attr) for attr in self._saved_state}

    def restore(self):
        self._set_attrs()

    def sync(self):
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state)
            self._set_attrs()

    def _set_attrs(self):
        for attr, value in self._saved_state.items():
            setattr(self, attr, value)


def run_fn(func, reset=None):
    """Horovod's run_fn: `func(state, ...)` run until it returns, resetting the membership and
    re-entering it after each PerseusInternalError (having restored the last commit) or
    HostsUpdatedInterrupt. `reset` defaults to elastic_worker.reset."""
    return run_loop(func, reset or elastic_worker.reset, lambda e: e)


def run_loop(func, reset, classify, on_membership=None):
    """run_fn's loop, which the framework layers' run_fn wrap. classify(exception) gives the
    exception to act on: a framework whose collectives fail with its own error type (MXNet's
    MXNetError) maps it to the Perseus one. on_membership() is called before the first entry
    and after each reset, before anything of the new membership runs: a framework forgets
    there what it knew of the old one (MXNet's recorded collective failure)."""
    on_membership = on_membership or (lambda: None)

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        need_sync = True  # a first entry: rank 0's state everywhere, as in Horovod
        on_membership()
        while True:
            try:
                state._agree_and_sync(need_sync)
                return func(state, *args, **kwargs)
            except Exception as raised:  # noqa: BLE001 - classified, and re-raised if not ours
                e = classify(raised)
                if isinstance(e, _NOT_RETRIED) or not isinstance(
                        e, (PerseusInternalError, HostsUpdatedInterrupt)):
                    raise
                elastic_worker.note_failure(e)
                _reset(reset, e)
                on_membership()
                if isinstance(e, HostsUpdatedInterrupt):
                    need_sync = not e.skip_sync
                else:
                    state.restore()
                    need_sync = True
            state.on_reset()
    return wrapper


def _reset(reset, cause):
    # A job not started in elastic mode has no membership to move to: re-initialising the same
    # ranks would only repeat a failure that every rank saw, for ever (init() after shutdown()
    # does re-form a fixed job). So the default reset is refused there, with the way out.
    if reset is elastic_worker.reset and not elastic_worker.enabled():
        raise PerseusInternalError(_fixed_job_message(cause, "no reset is attempted")) from cause
    try:
        reset()
    except Exception as e:  # noqa: BLE001 - re-raised, explained where it can be
        if elastic_worker.enabled():
            raise
        raise PerseusInternalError(_fixed_job_message(cause, e)) from e


def _fixed_job_message(cause, why):
    return ("hvd.elastic.run: the job could not be reset after %s (%s): %s. It was not started "
            "in elastic mode, so it cannot re-form; start it with perseusrun --min-np/--max-np/"
            "--host-discovery-script to recover from failures"
            % (type(cause).__name__, cause, why))


def run(func):
    """Decorator for elastic training: `hvd.elastic.run(train)(state, *args)`.

    The function re-runs from the last commit after a failure, and from the current step after
    a membership change; the state is synced (collectively decided) before every entry. The
    function must be where the collectives are: a new worker runs the state sync first, and a
    collective before run() would meet the survivors' sync instead."""
    return run_fn(func)
