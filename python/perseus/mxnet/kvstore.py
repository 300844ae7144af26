"""The Perseus KVStore: MXNet's dist_sync semantics over Perseus collectives.

``perseus.mxnet.create('dist_sync_perseus')`` (also 'dist-sync-perseus' and
'dist_device_sync_perseus'), or ``mx.kv.create(...)`` with the same names once perseus.mxnet is
imported. The store is a ``mx.kvstore.KVStore`` (the isinstance check of MXNet 1.4-1.6) and a
``KVStoreBase`` (1.7+); its ``type`` contains 'dist' and '_sync', so gluon.Trainer, Module and
fit.py treat it as distributed and Module scales the batch by ``num_workers``.

Semantics (MXNet dist_sync): values pushed for a key are summed over the devices of this rank
and then over all ranks. With an optimizer (``set_optimizer``), a gradient key's sum updates
the stored weight with a local updater applied identically on every rank; otherwise the sum
becomes the stored value. ``pull`` copies the stored value out. Every call is asynchronous and
ordered by MXNet's engine; failures surface as MXNetError when the results are read.

Extensions used by AIACC code: ``init(..., param_only=True)`` marks a key as a plain reduction
(never passed to the optimizer) and ``push(..., op=PerseusOp.Max)`` reduces with max or min.
"""
import ctypes
import pickle

import mxnet as mx
from mxnet.base import _LIB, check_call, c_str
from mxnet.kvstore import KVStore, KVStoreBase

from . import _basics
from . import mpi_ops


class PerseusOp:
    """Reductions for KVStore.push(op=...)."""
    Sum = mpi_ops.Sum
    Max = mpi_ops.Max
    Min = mpi_ops.Min


_TYPES = {
    "dist_sync_perseus": "dist_sync_perseus",
    "dist-sync-perseus": "dist_sync_perseus",
    "dist_device_sync_perseus": "dist_device_sync_perseus",
    "dist-device-sync-perseus": "dist_device_sync_perseus",
}


def _local_handle():
    # KVStore.__init__ asserts a KVStoreHandle and __del__ frees it: a 'local' store is the
    # cheapest valid one. It is never used for data.
    handle = ctypes.c_void_p()
    check_call(_LIB.MXKVStoreCreate(c_str("local"), ctypes.byref(handle)))
    return handle


def _is_list(v):
    return isinstance(v, (list, tuple))


class PerseusKVStore(KVStore):
    """A KVStore whose workers are the Perseus ranks (one process per device)."""

    def __init__(self, name="dist_sync_perseus"):
        kind = _TYPES.get(str(name).lower())
        if kind is None:
            raise ValueError("unknown Perseus KVStore type %r; use one of %s"
                             % (name, sorted(_TYPES)))
        super().__init__(_local_handle())
        _basics.init()
        self._type = kind
        self._store = {}        # key -> NDArray (the stored value or weight)
        self._param_only = set()
        self._key_type = None
        self._updater = None
        self._optimizer = None
        self._compression = None  # None, ('2bit', threshold) or ('fp16',)
        self._residuals = {}

    # -- properties -------------------------------------------------------------------------
    @property
    def type(self):
        return self._type

    @property
    def rank(self):
        return _basics.rank()

    @property
    def num_workers(self):
        return _basics.size()

    @property
    def local_rank(self):
        return _basics.local_rank()

    @property
    def local_size(self):
        return _basics.local_size()

    def is_capable(self, capability):
        if capability.lower() == KVStoreBase.OPTIMIZER:
            return True
        raise ValueError("Unknown capability: %s" % capability)

    # -- keys and values ----------------------------------------------------------------------
    def _check_key(self, key):
        kind = int if isinstance(key, int) and not isinstance(key, bool) else (
            str if isinstance(key, str) else None)
        if kind is None:
            raise ValueError("KVStore keys must be int or str, not %r" % (key,))
        if self._key_type is None:
            self._key_type = kind
        elif self._key_type is not kind:
            raise ValueError("Mixed key types are not allowed: this store uses %s keys and got "
                             "%r" % (self._key_type.__name__, key))
        return key

    def _pairs(self, key, value, what):
        """[(key, [NDArray...])] from one key or a list of keys."""
        if _is_list(key):
            if not _is_list(value) or len(value) != len(key):
                raise ValueError("%s: %d keys need a list of %d values"
                                 % (what, len(key), len(key)))
            return [(self._check_key(k), self._values(v, k, what)) for k, v in zip(key, value)]
        return [(self._check_key(key), self._values(value, key, what))]

    @staticmethod
    def _values(v, key, what):
        vals = list(v) if _is_list(v) else [v]
        if not vals or not all(isinstance(a, mx.nd.NDArray) for a in vals):
            raise ValueError("%s: key %r needs an NDArray or a non-empty list of NDArrays"
                             % (what, key))
        shape = vals[0].shape
        for a in vals:
            if a.shape != shape:
                raise ValueError("%s: key %r has values of different shapes %s and %s"
                                 % (what, key, shape, a.shape))
        return vals

    def _stored(self, key, what):
        try:
            return self._store[key]
        except KeyError:
            raise ValueError("%s: key %r has not been initialized; call init(%r, value) (or "
                             "broadcast) on every rank first" % (what, key, key)) from None

    @staticmethod
    def _name(kind, key):
        return "kv.%s.%s" % (kind, key)

    # -- init / broadcast ---------------------------------------------------------------------
    def init(self, key, value, param_only=False):
        """Initialises keys with rank 0's values (every rank calls it; returns once done)."""
        pairs = self._pairs(key, value, "init")
        for k, _ in pairs:
            if k in self._store:
                raise ValueError("init: duplicate init of key %r" % (k,))
        for k, vals in pairs:
            self._init_key(k, vals[0], param_only)
        for k, _ in pairs:  # as MXNet: init returns after the data is in place everywhere
            self._store[k].wait_to_read()

    def _init_key(self, key, value, param_only, priority=0):
        stored = value.copy()
        mpi_ops._broadcast_async(stored, stored, 0, self._name("init", key), priority,
                                 _basics.global_process_set)
        self._store[key] = stored
        if param_only:
            self._param_only.add(key)

    def broadcast(self, key, value, out, priority=0):
        """Rank 0's value into every ``out`` (initialises the key if needed)."""
        pairs = self._pairs(key, value, "broadcast")
        outs = self._outs(key, out, len(pairs), "broadcast")
        for (k, vals), o in zip(pairs, outs):
            if k in self._store:
                stored = self._store[k]
                stored[:] = vals[0]
                mpi_ops._broadcast_async(stored, stored, 0, self._name("init", k), priority,
                                         _basics.global_process_set)
            else:
                self._init_key(k, vals[0], False, priority)
            for a in o:
                self._store[k].copyto(a)

    def _outs(self, key, out, n, what):
        if out is None:
            raise ValueError("%s: out is required" % what)
        if _is_list(key):
            if not _is_list(out) or len(out) != n:
                raise ValueError("%s: %d keys need %d outputs" % (what, n, n))
            return [list(o) if _is_list(o) else [o] for o in out]
        return [list(out) if _is_list(out) else [out]]

    # -- push / pull --------------------------------------------------------------------------
    def push(self, key, value, priority=0, op=PerseusOp.Sum):
        """Sums (or max/min with ``op``) the values over devices and ranks, then stores the
        result, or applies the optimizer to the stored weight for gradient keys."""
        pairs = self._pairs(key, value, "push")
        for k, _ in pairs:
            self._stored(k, "push")
        for k, vals in pairs:
            self._push_key(k, vals, priority, op)

    def _push_key(self, key, vals, priority, op):
        stored = self._store[key]
        merged = self._merge(vals, op)
        grad_key = key not in self._param_only
        compressed, ctx = self._compress(key, merged) if grad_key else (merged, None)
        mpi_ops._allreduce_async([compressed], [compressed], self._name("push", key), op, 1.0,
                                 1.0, _basics.global_process_set, priority, grouped=False,
                                 after=[stored])
        merged = self._decompress(compressed, ctx, merged)
        if grad_key and self._updater is not None:
            self._updater(key, merged.as_in_context(stored.context), stored)
        else:
            merged.copyto(stored)

    @staticmethod
    def _merge(vals, op):
        if len(vals) == 1:
            return vals[0].copy()
        ctx = vals[0].context
        if op == PerseusOp.Sum:
            return mx.nd.add_n(*[v.as_in_context(ctx) for v in vals])
        fn = mx.nd.maximum if op == PerseusOp.Max else mx.nd.minimum
        out = vals[0].copy()
        for v in vals[1:]:
            out = fn(out, v.as_in_context(ctx))
        return out

    def pull(self, key, out=None, priority=0, ignore_sparse=True):
        """Copies the stored values into ``out`` (one NDArray or a list per key)."""
        keys = list(key) if _is_list(key) else [key]
        for k in keys:
            self._check_key(k)
        outs = self._outs(key, out, len(keys), "pull")
        for k, o in zip(keys, outs):
            stored = self._stored(k, "pull")
            for a in o:
                if a.stype != "default":
                    if ignore_sparse:
                        continue
                    raise ValueError("pull: key %r: sparse outputs are not supported; use "
                                     "dense arrays" % (k,))
                stored.copyto(a)

    def pushpull(self, key, value, out=None, priority=0):
        """push then pull in one step; in place when ``out`` is None."""
        pairs = self._pairs(key, value, "pushpull")
        outs = [v for _, v in pairs] if out is None else self._outs(key, out, len(pairs),
                                                                    "pushpull")
        for k, _ in pairs:
            self._stored(k, "pushpull")
        for (k, vals), o in zip(pairs, outs):
            fast = (self._updater is None and self._compression is None and out is None and
                    len(vals) == 1)
            if fast:  # one device, no optimizer: reduce the caller's array in place
                stored = self._store[k]
                mpi_ops._allreduce_async(vals, vals, self._name("push", k), PerseusOp.Sum, 1.0,
                                         1.0, _basics.global_process_set, priority,
                                         grouped=False, after=[stored])
                vals[0].copyto(stored)
                continue
            self._push_key(k, vals, priority, PerseusOp.Sum)
            for a in o:
                self._store[k].copyto(a)

    def row_sparse_pull(self, key, out=None, priority=0, row_ids=None):
        raise ValueError("row_sparse_pull is not supported by the Perseus KVStore: use dense "
                         "parameters (or gluon.Trainer with a dense model)")

    # -- optimizer ----------------------------------------------------------------------------
    def set_optimizer(self, optimizer):
        """Applies ``optimizer`` locally on every rank after the sum (same update everywhere)."""
        self._optimizer = optimizer
        self._updater = mx.optimizer.get_updater(optimizer)

    def _set_updater(self, updater):
        self._updater = updater

    def save_optimizer_states(self, fname, dump_optimizer=False):
        if self._updater is None:
            raise ValueError("save_optimizer_states: no optimizer set (call set_optimizer)")
        with open(fname, "wb") as f:
            f.write(self._updater.get_states(dump_optimizer))

    def load_optimizer_states(self, fname):
        if self._updater is None:
            raise ValueError("load_optimizer_states: no optimizer set (call set_optimizer)")
        with open(fname, "rb") as f:
            self._updater.set_states(f.read())

    # -- compression --------------------------------------------------------------------------
    def set_gradient_compression(self, compression_params):
        """{'type': '2bit', 'threshold': t} (error feedback) or {'type': 'fp16'};
        {'type': 'none'} turns it off. Applies to gradient keys (not param_only ones)."""
        if not isinstance(compression_params, dict) or "type" not in compression_params:
            raise ValueError("set_gradient_compression expects a dict with a 'type'")
        kind = str(compression_params["type"]).lower()
        if kind == "none":
            self._compression = None
        elif kind == "2bit":
            threshold = float(compression_params.get("threshold", 0.5))
            if threshold <= 0:
                raise ValueError("2bit compression needs threshold > 0, got %r" % threshold)
            self._compression = ("2bit", threshold)
        elif kind == "fp16":
            self._compression = ("fp16",)
        else:
            raise ValueError("Unknown type for gradient compression %r; use '2bit', 'fp16' or "
                             "'none'" % (compression_params["type"],))
        self._residuals.clear()

    def _compress(self, key, grad):
        if self._compression is None or "float" not in str(grad.dtype):
            return grad, None
        if self._compression[0] == "fp16":
            return grad.astype("float16"), grad.dtype
        t = self._compression[1]
        residual = self._residuals.get(key)
        if residual is None:
            residual = self._residuals[key] = mx.nd.zeros(grad.shape, grad.context, grad.dtype)
        residual += grad
        quantized = (residual >= t) * t - (residual <= -t) * t
        residual -= quantized
        return quantized, None

    @staticmethod
    def _decompress(compressed, ctx, merged):
        if ctx is None:
            return compressed
        return compressed.astype(ctx)

    # -- misc -----------------------------------------------------------------------------------
    def _barrier(self):
        mpi_ops.barrier()

    def _send_command_to_servers(self, head, body):
        raise ValueError("the Perseus KVStore has no servers")

    @property
    def num_dead_node(self):
        return 0

    def __getstate__(self):
        raise pickle.PicklingError("a Perseus KVStore cannot be pickled")


def _register():
    # mx.kv.create looks the lowercased name up among registered class names.
    for name in _TYPES:
        cls = type(name, (PerseusKVStore,), {
            "__init__": (lambda n: lambda self: PerseusKVStore.__init__(self, n))(name),
            "__doc__": PerseusKVStore.__doc__})
        if name not in KVStoreBase.kv_registry:
            KVStoreBase.register(cls)


def create(name="dist_sync_perseus"):
    """A Perseus KVStore ('dist_sync_perseus', 'dist-sync-perseus' or
    'dist_device_sync_perseus'); other names go to mx.kv.create."""
    if str(name).lower() in _TYPES:
        return PerseusKVStore(name)
    return mx.kv.create(name)
