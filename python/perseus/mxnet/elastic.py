"""Elastic training for MXNet, in the shape of horovod.torch.elastic (Horovod has none for
MXNet): `hvd.elastic.run(train)(state)` with

- GluonState(params=, trainer=, **kwargs): a Gluon ParameterDict and a gluon.Trainer or
  DistributedTrainer, with the optimizer's states (momentum, Adam moments) and counters;
- KVStoreState(kvstore, **kwargs): every key of a Perseus KVStore (Module API, or a training
  loop of push/pull), with the store's optimizer states.

Contract: training thread only; save() and restore() are local copies (to and from host memory),
sync() is collective and broadcasts from the source the run loop agreed on (State.sync_root).
"""

import copy

import mxnet as mx
import numpy as np

from perseus.common import exceptions
from perseus.common.elastic import worker as elastic_worker
from perseus.common.elastic.state import (  # noqa: F401
    HorovodInternalError, HostsUpdatedInterrupt, ObjectState, State, run_loop)

from . import _basics, mpi_ops
from .functions import broadcast_object, broadcast_parameters
from .kvstore import PerseusKVStore
from .mpi_ops import broadcast_
from .trainer import DistributedTrainer

_HOST = mx.cpu()


def run_fn(func, reset=None):
    """As perseus.common.elastic.state.run_fn, with MXNet's errors understood: a collective's
    failure reaches Python as MXNetError (when a result is read), and counts as the
    PerseusInternalError that the collective failed with."""
    return run_loop(func, reset or elastic_worker.reset, _perseus_error,
                    on_membership=mpi_ops.forget_failures)


def run(func):
    """Decorator for elastic training: `hvd.elastic.run(train)(state, *args)` (see
    perseus.common.elastic.state.run)."""
    return run_fn(func)


def _perseus_error(e):
    """The Perseus exception behind an MXNetError raised by a collective (else `e` itself):
    the one a blocking collective raised it from, or the failure of a collective pushed into
    MXNet's engine (mpi_ops.collective_failure()), whose arrays raise it when read."""
    if not isinstance(e, mx.base.MXNetError):
        return e
    cause = e
    while cause is not None:
        if isinstance(cause, exceptions.PerseusInternalError):
            return cause
        cause = cause.__cause__ or cause.__context__
    failure = mpi_ops.collective_failure()
    return e if failure is None else failure


class _OptimizerHandler:
    """An MXNet optimizer's update counters, learning rate and scheduler, and the states of
    the updaters that apply it (one per device for a Trainer, or the KVStore's)."""

    def __init__(self, get_optimizer, get_updaters):
        self._optimizer = get_optimizer
        self._updaters = get_updaters
        self._saved = None

    def snapshot(self):
        opt = self._optimizer()
        if opt is None:
            return None
        scheduler = getattr(opt, "lr_scheduler", None)
        return {
            "num_update": opt.num_update,
            "lr": opt.lr,
            "counts": {device: dict(c) for device, c in opt._all_index_update_counts.items()},
            "scheduler": None if scheduler is None else copy.deepcopy(scheduler.__dict__),
            "updaters": [u.get_states(dump_optimizer=False) for u in self._updaters()],
        }

    def load(self, snap):
        opt = self._optimizer()
        if snap is None or opt is None:
            return
        opt.num_update, opt.lr = snap["num_update"], snap["lr"]
        # _index_update_count is one of these dicts (per device): update them in place.
        for device, saved in snap["counts"].items():
            counts = opt._all_index_update_counts.setdefault(device, {})
            counts.clear()
            counts.update(saved)
        if snap["scheduler"] is not None and getattr(opt, "lr_scheduler", None) is not None:
            opt.lr_scheduler.__dict__.update(copy.deepcopy(snap["scheduler"]))
        updaters = self._updaters()
        if len(updaters) != len(snap["updaters"]):
            raise ValueError("elastic state: %d optimizer updaters here, %d in the saved state "
                             "(every rank must use as many devices)"
                             % (len(updaters), len(snap["updaters"])))
        for updater, states in zip(updaters, snap["updaters"]):
            updater.set_states(states)

    def save(self):
        self._saved = self.snapshot()

    def restore(self):
        self.load(self._saved)

    def sync(self, root):
        self.load(broadcast_object(self.snapshot(), root, name="elastic.optimizer_state"))


def _as_params(params):
    if params is None or isinstance(params, (dict, mx.gluon.parameter.ParameterDict)):
        return params
    if isinstance(params, (list, tuple)):
        return {p.name: p for p in params}
    raise ValueError("GluonState: params must be a ParameterDict (block.collect_params()), a "
                     "dict or a list of Parameters, not %s" % type(params).__name__)


class GluonState(ObjectState):
    """State of a Gluon training process: the parameters (`params`, e.g.
    net.collect_params()), the `trainer`'s optimizer states and counters, and any keyword
    argument as in ObjectState. A DistributedTrainer's gradient averaging follows size()
    after a reset; a Trainer over a Perseus KVStore gets its store refilled from the synced
    parameters, on new workers too."""

    def __init__(self, params=None, trainer=None, **kwargs):
        self.params = _as_params(params)
        self.trainer = trainer
        self._trainer_size = _basics.size()
        if trainer is not None:
            _init_kvstore(trainer)
        self._optimizer_state = _OptimizerHandler(
            lambda: None if self.trainer is None else self.trainer._optimizer,
            lambda: _trainer_updaters(self.trainer))
        self._saved_params = None
        super().__init__(bcast_object=broadcast_object, **kwargs)
        self._save_own()

    def _items(self):
        return [] if self.params is None else sorted(self.params.items())

    def _save_own(self):
        params = _finished({name: p.list_data()[0].copyto(_HOST)
                            for name, p in self._items() if _initialized(p)})
        optimizer = self._optimizer_state.snapshot()
        self._saved_params, self._optimizer_state._saved = params, optimizer

    def save(self):
        self._save_own()
        super().save()

    def restore(self):
        for name, p in self._items():
            if name in self._saved_params:
                # In place: Parameter.set_data would reset the trainer's kvstore, which MXNet
                # refuses for a distributed one.
                for data in p.list_data():
                    _drop_failure(data)
                    self._saved_params[name].copyto(data)
                for grad in (p.list_grad() if p.grad_req != "null" else ()):
                    _drop_failure(grad)
        self._optimizer_state.restore()
        if self.trainer is not None:
            _refill_trainer_store(self.trainer)
        super().restore()

    def sync(self):
        root = self.sync_root
        if self.params is not None:
            broadcast_parameters(self.params, root_rank=root, prefix="elastic.")
        if self.trainer is not None:
            _init_kvstore(self.trainer)
            self._optimizer_state.sync(root)
            _refill_trainer_store(self.trainer)
        super().sync()

    def reset(self):
        trainer = self.trainer
        size = _basics.size()
        if isinstance(trainer, DistributedTrainer) and trainer._process_set.process_set_id == 0:
            # Its gradient sum is averaged through _scale (1/size at construction).
            trainer._scale *= self._trainer_size / size
        self._trainer_size = size
        super().reset()


class KVStoreState(ObjectState):
    """State over every key of a Perseus KVStore: the stored values (the weights, for gradient
    keys with an optimizer) and the store's optimizer states. sync() gives every rank the
    source's keys, creating those a new worker lacks, so that it need not call init()
    (collective) outside hvd.elastic.run()."""

    def __init__(self, kvstore, **kwargs):
        if not isinstance(kvstore, PerseusKVStore):
            raise ValueError("KVStoreState needs a Perseus KVStore "
                             "(perseus.mxnet.create('dist_sync_perseus')), not %s"
                             % type(kvstore).__name__)
        self.kvstore = kvstore
        self._optimizer_state = _OptimizerHandler(
            lambda: kvstore._optimizer,
            lambda: [] if kvstore._updater is None else [kvstore._updater])
        self._saved_store = None
        super().__init__(bcast_object=broadcast_object, **kwargs)
        self._save_own()

    def init_keys(self, keys, values, param_only=False):
        """Adds the keys this store lacks, with these values, on this rank only: the sync at
        the next entry of hvd.elastic.run() makes them the source's on every rank (rank 0's at
        the first), as init() would, and a new worker's keys come from that sync too."""
        kv = self.kvstore
        for key, value in zip(*((keys, values) if isinstance(keys, (list, tuple))
                                else ([keys], [values]))):
            if key not in kv._store:
                kv._check_key(key)
                kv._store[key] = value.copy()
                if param_only:
                    kv._param_only.add(key)

    def _save_own(self):
        copies = _finished({k: v.copyto(_HOST) for k, v in self.kvstore._store.items()})
        optimizer = self._optimizer_state.snapshot()
        self._saved_store = {k: (copies[k], v.context) for k, v in self.kvstore._store.items()}
        self._optimizer_state._saved = optimizer

    def save(self):
        self._save_own()
        super().save()

    def restore(self):
        store = self.kvstore._store
        for key in list(store):
            if key not in self._saved_store:
                del store[key]  # initialised after the commit
        for key, (value, context) in self._saved_store.items():
            if key in store:
                _drop_failure(store[key])  # a failed push's, or the copy would not land
                value.copyto(store[key])
            else:
                store[key] = value.copyto(context)
        self._optimizer_state.restore()
        super().restore()

    def sync(self):
        root = self.sync_root
        kv = self.kvstore
        mine = [(k, v.shape, np.dtype(v.dtype).name, k in kv._param_only)
                for k, v in _sorted(kv._store)]
        layout = broadcast_object(mine, root, name="elastic.kvstore_keys")
        for key, shape, dtype, param_only in layout:
            if key not in kv._store:
                kv._check_key(key)
                kv._store[key] = mx.nd.zeros(shape, ctx=_store_context(kv), dtype=dtype)
            if param_only:
                kv._param_only.add(key)
        for key, _, _, _ in layout:
            broadcast_(kv._store[key], root, name="elastic.kv.%s" % (key,))
        for key, _, _, _ in layout:
            kv._store[key].wait_to_read()
        self._optimizer_state.sync(root)
        super().sync()


def _drop_failure(array):
    """Clears the error that a failed collective left on `array`. MXNet's engine keeps an
    operation's error on the arrays it writes (a gradient's failed allreduce, then the
    optimizer update that read it and wrote the weight) until something waits on them: a copy
    into such an array is skipped, and the error comes back at the next read, in the next
    membership. Waiting raises it once and clears it."""
    try:
        array.wait_to_read()
    except mx.base.MXNetError:
        pass


def _finished(copies):
    """`copies` once MXNet has made them. A commit must hold a finished step: copies are
    asynchronous, and a copy queued behind a step whose collectives failed is never made (its
    array holds garbage). Such a step raises its MXNetError here, before anything is kept, so
    the last commit stays the one to restore."""
    for array in copies.values():
        array.wait_to_read()
    return copies


def _sorted(store):
    return sorted(store.items(), key=lambda kv: str(kv[0]))


def _store_context(kv):
    for v in kv._store.values():
        return v.context
    return mx.cpu()


def _initialized(param):
    try:
        param.list_data()
        return True
    except mx.gluon.parameter.DeferredInitializationError:
        return False


def _init_kvstore(trainer):
    """Creates the trainer's kvstore and optimizer updaters now (a local step, with a Perseus
    or no kvstore) rather than at its first step(), so that its optimizer states exist on every
    rank before the first sync."""
    if not trainer._kv_initialized:
        if not all(_initialized(p) for p in trainer._params):
            return  # deferred: the trainer makes them at its first step (see elastic-api.md)
        trainer._init_kvstore()
        if trainer._update_on_kvstore and trainer._distributed:
            _first_step_sets_rescale(trainer)
    kv = trainer._kvstore
    if trainer._update_on_kvstore and kv is not None and not isinstance(kv, PerseusKVStore):
        raise ValueError("GluonState: the trainer updates on a %s kvstore, whose optimizer "
                         "states Perseus cannot reach; use DistributedTrainer, kvstore=None, "
                         "or a Perseus KVStore" % kv.type)


def _first_step_sets_rescale(trainer):
    """Trainer.step() sets the optimizer's rescale_grad (1/batch size) before it creates the
    kvstore, and from then on, with update_on_kvstore, refuses a different value (a batch size
    change). Its kvstore now exists before that first step: the first step sets the value,
    as it would have, and the check applies from the second."""
    def set_rescale(scale):
        del trainer._check_and_rescale_grad  # back to Trainer's own check
        trainer._optimizer.rescale_grad = scale
    trainer._check_and_rescale_grad = set_rescale


def _trainer_updaters(trainer):
    if trainer is None:
        return []
    kv = trainer._kvstore
    if trainer._update_on_kvstore and isinstance(kv, PerseusKVStore):
        return [] if kv._updater is None else [kv._updater]
    return list(trainer._updaters)


def _refill_trainer_store(trainer):
    """A Trainer over a Perseus KVStore keeps a copy of each parameter in the store (the weight
    itself when it updates on the store): after the parameters were synced, that copy is set
    from them on every rank, and no rank is left with a first-step init() (a broadcast from
    rank 0 that the others would not join)."""
    kv = trainer._kvstore
    if not isinstance(kv, PerseusKVStore):
        return
    pending = []
    for param in trainer._params_to_init:
        if param._deferred_init:
            pending.append(param)
    for param in trainer._params:
        if not _initialized(param):
            continue
        idx = trainer._param2idx[param.name]
        data = param.list_data()[0]
        if idx in kv._store:
            _drop_failure(kv._store[idx])
            data.copyto(kv._store[idx])
        else:
            kv._check_key(idx)
            kv._store[idx] = data.copy()
    trainer._params_to_init = pending
