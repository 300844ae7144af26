"""PerseusSyncBatchNorm: batch normalisation whose statistics span processes.

Registered on ``import perseus.mxnet`` as ``mx.gluon.contrib.nn.PerseusSyncBatchNorm``,
``mx.sym.contrib.PerseusSyncBatchNorm`` and ``mx.nd.contrib.PerseusSyncBatchNorm``. It is a
CustomOp (``op_type='perseus_sync_batch_norm'``), so it survives ``hybridize()`` and runs in
Module/symbol graphs. The arithmetic is in sync_bn_math.py.

comm_scope: 0 (default) synchronises the ranks of this host (the LOCAL process set), 1 all ranks.
Each layer's collectives are named after its key, which must be unique per layer and equal on
every rank (the Gluon prefix, or the symbol's name): two layers with one key are an error.

Threads: forward/backward run on MXNet's CustomOperator threads and block there on the
allreduce (never on an engine worker), in graph order, which is the same on every rank.
"""
import os
import threading
import warnings

import mxnet as mx
from mxnet.gluon import nn

from . import sync_bn_math as M

OP_TYPE = "perseus_sync_batch_norm"
SCOPE_LOCAL = 0
SCOPE_GLOBAL = 1

_provider_lock = threading.Lock()
_provider = None  # scope -> allreduce(name, vector) -> vector
_ready = None     # () -> bool: whether the provider can run now


def set_allreduce_provider(provider, ready=None):
    """Sets how statistics are summed: ``provider(scope)`` returns a blocking
    ``allreduce(name, float64 NDArray) -> NDArray``; ``ready()`` says whether it can run yet
    (default: always). perseus.mxnet installs the Perseus one on import; tests may inject
    another. Returns the previous provider."""
    global _provider, _ready
    with _provider_lock:
        previous, _provider, _ready = _provider, provider, ready
    return previous


def _check_ready(key):
    with _provider_lock:
        provider, ready = _provider, _ready
    if provider is None or (ready is not None and not ready()):
        raise RuntimeError("PerseusSyncBatchNorm %r: call perseus.mxnet.init() (or create a "
                           "Perseus KVStore) before training with it" % (key,))
    return provider


def _allreduce_for(scope, key=""):
    return _check_ready(key)(scope)


def _parse_scope(v):
    """comm_scope as an int, from the string MXNet hands a CustomOpProp ("1", "'1'", "1.0").
    Not ast.literal_eval: MXNet builds props on several of its threads at once, and CPython
    3.11's AST constructor keeps its recursion depth in module state, so concurrent compile()
    calls raise SystemError (CPython gh-106905), which MXNet's op creator turns into a crash."""
    text = str(v).strip().strip("'\"")
    try:
        number = float(text)
    except ValueError:
        return None
    return int(number) if number.is_integer() else None


def _parse_bool(v):
    if isinstance(v, bool):
        return v
    return str(v).strip().lower() in ("1", "true")


class _SyncBatchNormOp(mx.operator.CustomOp):
    def __init__(self, eps, momentum, fix_gamma, use_global_stats, output_mean_var, key, scope):
        super().__init__()
        self.eps, self.momentum = eps, momentum
        self.fix_gamma, self.use_global_stats = fix_gamma, use_global_stats
        self.output_mean_var = output_mean_var
        self.key, self.scope = key, scope
        self._saved = None  # (mean, var, invstd, count) of the last training forward

    def forward(self, is_train, req, in_data, out_data, aux):
        x, gamma, beta = in_data
        moving_mean, moving_var = aux
        if is_train and not self.use_global_stats:
            y, mean, var, invstd, count = M.forward_train(
                x, gamma, beta, self.eps, self.fix_gamma,
                _allreduce_for(self.scope, self.key), "sync_bn.%s.fwd" % self.key)
            self._saved = (mean, var, invstd, count)
        else:
            mean, var = moving_mean, moving_var
            y, invstd = M.normalize(x, gamma, beta, mean, var, self.eps, self.fix_gamma)
            self._saved = None
        if y is not None:  # None: an empty batch, nothing to write
            self.assign(out_data[0], req[0], y)
        if self.output_mean_var:
            self.assign(out_data[1], req[1], mean.astype(out_data[1].dtype))
            self.assign(out_data[2], req[2], var.astype(out_data[2].dtype))

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        x, gamma, _ = in_data
        dy = out_grad[0]
        moving_mean, moving_var = aux
        if self._saved is None and M.is_empty(x):  # nothing flows through an empty batch
            dx = None
            dgamma = dbeta = mx.nd.zeros(gamma.shape, ctx=gamma.context, dtype=gamma.dtype)
        elif self._saved is None:  # global statistics: no communication
            dx = M.backward_global_stats(dy, gamma, moving_var, self.eps, self.fix_gamma)
            mean, var = moving_mean, moving_var
            invstd = 1.0 / mx.nd.sqrt(var.astype("float64") + self.eps)
            shape = (1, -1) + (1,) * (len(x.shape) - 2)
            xhat = mx.nd.broadcast_mul(
                mx.nd.broadcast_sub(x.astype("float64"), mean.astype("float64").reshape(shape)),
                invstd.reshape(shape))
            dy64 = dy.astype("float64")
            dbeta = mx.nd.sum(dy64, axis=1, exclude=True).astype(gamma.dtype)
            dgamma = mx.nd.sum(dy64 * xhat, axis=1, exclude=True).astype(gamma.dtype)
            if self.fix_gamma:
                dgamma = mx.nd.zeros_like(dgamma)
        else:
            mean, var, invstd, count = self._saved
            dx, dgamma, dbeta = M.backward_train(
                dy, x, gamma, mean, invstd, count, self.fix_gamma,
                _allreduce_for(self.scope, self.key), "sync_bn.%s.bwd" % self.key)
            # As MXNet's (Sync)BatchNorm: the moving statistics move in the backward pass.
            M.update_moving(moving_mean, moving_var, mean, var, self.momentum)
        if dx is not None:
            self.assign(in_grad[0], req[0], dx)
        self.assign(in_grad[1], req[1], dgamma)
        self.assign(in_grad[2], req[2], dbeta)


@mx.operator.register(OP_TYPE)
class _SyncBatchNormProp(mx.operator.CustomOpProp):
    """Arguments arrive as strings (MXNet CustomOp convention)."""

    def __init__(self, eps="1e-3", momentum="0.9", fix_gamma="True", use_global_stats="False",
                 output_mean_var="False", key="", comm_scope="0", ndev="1"):
        super().__init__(need_top_grad=True)
        self.eps = float(eps)
        self.momentum = float(momentum)
        self.fix_gamma = _parse_bool(fix_gamma)
        self.use_global_stats = _parse_bool(use_global_stats)
        self.output_mean_var = _parse_bool(output_mean_var)
        self.key = str(key)
        self.scope = _parse_scope(comm_scope)
        if self.scope not in (SCOPE_LOCAL, SCOPE_GLOBAL):
            raise ValueError("PerseusSyncBatchNorm %r: comm_scope must be 0 (ranks of this host) "
                             "or 1 (all ranks), not %r" % (self.key, comm_scope))
        if not self.key:
            raise ValueError("PerseusSyncBatchNorm needs a key unique per layer")

    def list_arguments(self):
        return ["data", "gamma", "beta"]

    def list_outputs(self):
        return ["output", "mean", "var"] if self.output_mean_var else ["output"]

    def list_auxiliary_states(self):
        return ["moving_mean", "moving_var"]

    def infer_shape(self, in_shape):
        data = in_shape[0]
        channels = (data[1],)
        outs = [data] + ([channels, channels] if self.output_mean_var else [])
        return [data, channels, channels], outs, [channels, channels]

    def infer_type(self, in_type):
        dtype = in_type[0]
        n_out = 3 if self.output_mean_var else 1
        return [dtype] * 3, [dtype] * n_out, [dtype] * 2

    def create_operator(self, ctx, in_shapes, in_dtypes):
        _warn_if_mkldnn(ctx)
        return _SyncBatchNormOp(self.eps, self.momentum, self.fix_gamma, self.use_global_stats,
                                self.output_mean_var, self.key, self.scope)


_mkldnn_warned = False


def _warn_if_mkldnn(ctx):
    """MXNet 1.9.1's CPU wheels hand a CustomOp arrays in MKLDNN's layout after a convolution
    and read its outputs as such: the results are garbage or the process crashes, for any
    CustomOp (docs/sync_bn.md, *Known problem*). MKLDNN is switched at process start only, so
    all Perseus can do is say so, once, before the first CPU layer runs."""
    global _mkldnn_warned
    if _mkldnn_warned or not str(ctx).startswith("cpu"):
        return
    if os.environ.get("MXNET_MKLDNN_ENABLED", "1").lower() in ("0", "false"):
        return
    try:
        enabled = mx.runtime.Features().is_enabled("MKLDNN")
    except Exception:  # an MXNet without the features API: nothing to warn about
        return
    if enabled:
        _mkldnn_warned = True
        warnings.warn("PerseusSyncBatchNorm on CPU with MKLDNN enabled: after a convolution, "
                      "MXNet 1.9.1 gives CustomOps arrays in MKLDNN's layout, and the results "
                      "are wrong. Start the job with MXNET_MKLDNN_ENABLED=0 (perseusrun passes "
                      "it on to every rank); GPU contexts are not affected.", RuntimeWarning)


_keys_lock = threading.Lock()
_keys = {}


def unique_key(key):
    """`key`, or `key#n` for its n-th repeat in this process: deterministic across ranks that
    build the same model, so layers never share a collective name."""
    with _keys_lock:
        n = _keys.get(key, 0)
        _keys[key] = n + 1
    return key if n == 0 else "%s#%d" % (key, n)


def _op_kwargs(eps, momentum, fix_gamma, use_global_stats, output_mean_var, key, comm_scope):
    return dict(op_type=OP_TYPE, eps=eps, momentum=momentum, fix_gamma=bool(fix_gamma),
                use_global_stats=bool(use_global_stats), output_mean_var=bool(output_mean_var),
                key=key, comm_scope=int(comm_scope))


def _make_frontend(F):
    def PerseusSyncBatchNorm(data=None, gamma=None, beta=None, moving_mean=None, moving_var=None,
                             eps=1e-3, momentum=0.9, fix_gamma=True, use_global_stats=False,
                             output_mean_var=False, ndev=1, key=None, comm_scope=SCOPE_LOCAL,
                             name=None, **kwargs):
        """Drop-in for ``contrib.SyncBatchNorm`` across processes (``ndev`` is accepted and
        ignored: one device per process). ``comm_scope`` 0: this host's ranks, 1: all."""
        del ndev
        if key is None:
            if F is mx.sym:
                name = mx.name.NameManager.current.get(name, "perseussyncbatchnorm")
                key = name
            else:
                raise ValueError("mx.nd.contrib.PerseusSyncBatchNorm needs key= (unique per layer)")
        inputs = [a for a in (data, gamma, beta, moving_mean, moving_var) if a is not None]
        if F is mx.sym:
            named = dict(zip(["data", "gamma", "beta", "moving_mean", "moving_var"],
                             [data, gamma, beta, moving_mean, moving_var]))
            named = {k: v for k, v in named.items() if v is not None}
            return F.Custom(name=name, **named, **kwargs,
                            **_op_kwargs(eps, momentum, fix_gamma, use_global_stats,
                                         output_mean_var, key, comm_scope))
        return F.Custom(*inputs, name=name, **kwargs,
                        **_op_kwargs(eps, momentum, fix_gamma, use_global_stats,
                                     output_mean_var, key, comm_scope))
    return PerseusSyncBatchNorm


class PerseusSyncBatchNorm(nn.BatchNorm):
    """Gluon cross-process SyncBatchNorm (the parameters of gluon.contrib.nn.SyncBatchNorm plus
    ``comm_scope``). Statistics are count-weighted over the ranks of the scope."""

    def __init__(self, in_channels=0, num_devices=None, momentum=0.9, epsilon=1e-5, center=True,
                 scale=True, use_global_stats=False, beta_initializer="zeros",
                 gamma_initializer="ones", running_mean_initializer="zeros",
                 running_variance_initializer="ones", comm_scope=SCOPE_LOCAL, **kwargs):
        super().__init__(axis=1, momentum=momentum, epsilon=epsilon, center=center, scale=scale,
                         use_global_stats=use_global_stats, beta_initializer=beta_initializer,
                         gamma_initializer=gamma_initializer,
                         running_mean_initializer=running_mean_initializer,
                         running_variance_initializer=running_variance_initializer,
                         in_channels=in_channels, **kwargs)
        del num_devices  # one device per process
        if comm_scope not in (SCOPE_LOCAL, SCOPE_GLOBAL):
            raise ValueError("PerseusSyncBatchNorm: comm_scope must be 0 or 1, not %r"
                             % (comm_scope,))
        self._op_kwargs = _op_kwargs(epsilon, momentum, not scale, use_global_stats, False,
                                     unique_key(self.prefix), comm_scope)

    def forward(self, x, *args):
        # hybrid_forward runs once when hybridized; this runs on every call, so a missing
        # init() fails here, in the caller's thread, rather than inside a CustomOp thread.
        if mx.autograd.is_training() and not self._op_kwargs["use_global_stats"]:
            _check_ready(self._op_kwargs["key"])
        return super().forward(x, *args)

    def hybrid_forward(self, F, x, gamma, beta, running_mean, running_var):
        return F.Custom(x, gamma, beta, running_mean, running_var, name="fwd", **self._op_kwargs)

    def __repr__(self):
        return "%s(comm_scope=%d, key=%r)" % (self.__class__.__name__,
                                              self._op_kwargs["comm_scope"],
                                              self._op_kwargs["key"])


def register():
    """Exposes the layer and the operator in MXNet's contrib namespaces (idempotent)."""
    setattr(mx.gluon.contrib.nn, "PerseusSyncBatchNorm", PerseusSyncBatchNorm)
    setattr(mx.sym.contrib, "PerseusSyncBatchNorm", _make_frontend(mx.sym))
    setattr(mx.nd.contrib, "PerseusSyncBatchNorm", _make_frontend(mx.nd))
    for mod in (mx.gluon.contrib.nn, mx.sym.contrib, mx.nd.contrib):
        names = getattr(mod, "__all__", None)
        if isinstance(names, list) and "PerseusSyncBatchNorm" not in names:
            names.append("PerseusSyncBatchNorm")
