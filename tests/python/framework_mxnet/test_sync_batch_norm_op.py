"""PerseusSyncBatchNorm as an MXNet operator (Gluon, hybridized, symbol API), one process.

Ranks are threads meeting in a summing allreduce (the operator's CustomOp threads block in it
concurrently, as they block in Perseus' allreduce in a real job); multi-process runs are in
test_mx_multirank.py.
"""
import ast
import os
import subprocess
import sys
import threading

import mxnet as mx
import numpy as np
import pytest

from perseus.mxnet import sync_batch_norm as S

pytestmark = pytest.mark.timeout(60)
S.register()


class ThreadGroup:
    """A summing allreduce among `size` threads; records the scopes and names it saw."""

    def __init__(self, size):
        self.barrier = threading.Barrier(size, timeout=20)
        self.lock = threading.Lock()
        self.parts, self.calls = [], []

    def provider(self, scope):
        def allreduce(name, vec):
            with self.lock:
                self.parts.append(vec.asnumpy())
                self.calls.append((scope, name))
            self.barrier.wait()
            total = sum(self.parts)
            if self.barrier.wait() == 0:
                self.parts.clear()
            self.barrier.wait()
            return mx.nd.array(total, dtype="float64")
        return allreduce


@pytest.fixture
def group():
    holder = {}

    def make(size):
        holder["g"] = ThreadGroup(size)
        S.set_allreduce_provider(holder["g"].provider)
        return holder["g"]
    previous = S.set_allreduce_provider(None)
    yield make
    S.set_allreduce_provider(previous)


def _params(block):
    p = block.collect_params()
    get = lambda suffix: [v for k, v in p.items() if k.endswith(suffix)][0]  # noqa: E731
    return get("gamma"), get("beta"), get("running_mean"), get("running_var")


def _train_step(block, x, dy):
    xx = mx.nd.array(x)
    xx.attach_grad()
    with mx.autograd.record():
        y = block(xx)
    y.backward(mx.nd.array(dy))
    g, b, rm, rv = _params(block)
    grad = lambda p: p.grad().asnumpy() if p.grad_req != "null" else np.zeros(p.shape)  # noqa
    return [y.asnumpy(), xx.grad.asnumpy(), grad(g), grad(b),
            rm.data().asnumpy(), rv.data().asnumpy()]


def _reference(x, dy, scale=True):
    bn = mx.gluon.nn.BatchNorm(in_channels=x.shape[1], scale=scale)
    bn.initialize()
    return _train_step(bn, x, dy)


def _data(n, c=3, seed=0):
    rng = np.random.RandomState(seed)
    x = rng.randn(n, c, 4, 5).astype("float32") * 2 + 1
    return x, rng.randn(*x.shape).astype("float32")


@pytest.mark.parametrize("hybridize", [False, True])
@pytest.mark.parametrize("sizes", [(3, 3), (1, 5), (2, 3, 4)])
def test_gluon_ranks_match_batchnorm_on_full_batch(group, hybridize, sizes):
    g = group(len(sizes))
    x, dy = _data(sum(sizes))
    ref = _reference(x, dy)
    bounds = np.cumsum((0,) + sizes)
    out, errors = [None] * len(sizes), []

    def rank(r):
        try:
            blk = mx.gluon.contrib.nn.PerseusSyncBatchNorm(in_channels=3, prefix="bnx_",
                                                          comm_scope=1)
            blk.initialize()
            if hybridize:
                blk.hybridize()
            sl = slice(bounds[r], bounds[r + 1])
            out[r] = _train_step(blk, x[sl], dy[sl])
        except Exception as e:  # noqa: BLE001
            errors.append(e)
            g.barrier.abort()
    threads = [threading.Thread(target=rank, args=(r,)) for r in range(len(sizes))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(40)
    assert not errors, errors
    np.testing.assert_allclose(np.concatenate([o[0] for o in out]), ref[0], atol=1e-4)
    np.testing.assert_allclose(np.concatenate([o[1] for o in out]), ref[1], atol=1e-4)
    np.testing.assert_allclose(sum(o[2] for o in out), ref[2], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(sum(o[3] for o in out), ref[3], rtol=1e-4, atol=1e-4)
    for o in out:
        np.testing.assert_allclose(o[4], ref[4], atol=1e-6)
        np.testing.assert_allclose(o[5], ref[5], atol=1e-6)
    assert {scope for scope, _ in g.calls} == {1}
    # one process holds every simulated rank, so later layers get "bnx_#n" keys
    assert all(name.startswith("sync_bn.bnx_") for _, name in g.calls)


def test_scale_false_fixes_gamma(group):
    group(1)
    x, dy = _data(4)
    blk = mx.gluon.contrib.nn.PerseusSyncBatchNorm(in_channels=3, scale=False)
    blk.initialize()
    got, ref = _train_step(blk, x, dy), _reference(x, dy, scale=False)
    for a, b in zip(got, ref):
        np.testing.assert_allclose(a, b, atol=1e-4)
    assert blk.gamma.grad_req == "null"


def test_inference_and_global_stats_use_moving_statistics_without_communication(group):
    g = group(1)
    x, dy = _data(4)
    blk = mx.gluon.contrib.nn.PerseusSyncBatchNorm(in_channels=3, use_global_stats=True)
    ref = mx.gluon.nn.BatchNorm(in_channels=3, use_global_stats=True)
    for b in (blk, ref):
        b.initialize()
        _params(b)[2].set_data(mx.nd.array([0.5, -1, 2]))
        _params(b)[3].set_data(mx.nd.array([2, 0.5, 3]))
    for a, b in zip(_train_step(blk, x, dy), _train_step(ref, x, dy)):
        np.testing.assert_allclose(a, b, atol=1e-4)
    plain = mx.gluon.contrib.nn.PerseusSyncBatchNorm(in_channels=3)
    plain.initialize()
    np.testing.assert_allclose(plain(mx.nd.array(x)).asnumpy(),
                               x / np.sqrt(1 + 1e-5), atol=1e-5)  # predict mode
    assert g.calls == []


def test_default_scope_is_local_and_keys_are_unique(group):
    g = group(1)
    x, dy = _data(2)
    a = mx.gluon.contrib.nn.PerseusSyncBatchNorm(in_channels=3, prefix="same_")
    b = mx.gluon.contrib.nn.PerseusSyncBatchNorm(in_channels=3, prefix="same_")
    for blk in (a, b):
        blk.initialize()
        _train_step(blk, x, dy)
    assert {scope for scope, _ in g.calls} == {0}
    names = [name for _, name in g.calls]
    assert "sync_bn.same_.fwd" in names and "sync_bn.same_#1.fwd" in names


def test_bad_comm_scope():
    with pytest.raises(ValueError, match="comm_scope"):
        mx.gluon.contrib.nn.PerseusSyncBatchNorm(comm_scope=2)


def test_prop_parses_comm_scope_without_compiling(monkeypatch):
    # MXNet builds props on several of its threads at once; CPython 3.11's compile() is not safe
    # there (gh-106905: SystemError, then MXNet crashes), so the prop must not call it.
    def no_parse(*args, **kwargs):
        raise AssertionError("the prop compiled its arguments")
    monkeypatch.setattr(ast, "parse", no_parse)
    for text, scope in (("1", 1), ("'1'", 1), ("0.0", 0), (" 0 ", 0)):
        assert S._SyncBatchNormProp(comm_scope=text, key="k").scope == scope
    for text in ("2", "one", "0.5"):
        with pytest.raises(ValueError, match="comm_scope must be 0"):
            S._SyncBatchNormProp(comm_scope=text, key="k")


def test_symbol_api_matches_batchnorm(group):
    g = group(1)
    x, dy = _data(5)
    data = mx.sym.var("data")
    sym = mx.sym.contrib.PerseusSyncBatchNorm(data=data, eps=1e-3, momentum=0.8, fix_gamma=False,
                                              ndev=1, name="sbn0")
    ref_sym = mx.sym.BatchNorm(data=data, eps=1e-3, momentum=0.8, fix_gamma=False, name="sbn0")
    assert sym.list_arguments() == ref_sym.list_arguments()
    assert sym.list_auxiliary_states() == ref_sym.list_auxiliary_states()
    results = []
    for s in (sym, ref_sym):
        exe = s.simple_bind(mx.cpu(), data=x.shape)
        exe.arg_dict["data"][:] = x
        exe.arg_dict["sbn0_gamma"][:] = mx.nd.array([0.5, 1.5, 2.0])
        exe.arg_dict["sbn0_beta"][:] = mx.nd.array([0.1, -0.2, 0.3])
        exe.aux_dict["sbn0_moving_mean"][:] = 0
        exe.aux_dict["sbn0_moving_var"][:] = 1
        exe.forward(is_train=True)
        exe.backward(mx.nd.array(dy))
        results.append([exe.outputs[0].asnumpy(), exe.grad_dict["data"].asnumpy(),
                        exe.grad_dict["sbn0_gamma"].asnumpy(),
                        exe.grad_dict["sbn0_beta"].asnumpy(),
                        exe.aux_dict["sbn0_moving_mean"].asnumpy(),
                        exe.aux_dict["sbn0_moving_var"].asnumpy()])
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
    assert [name for _, name in g.calls] == ["sync_bn.sbn0.fwd", "sync_bn.sbn0.bwd"]


def test_symbol_api_global_scope_and_output_mean_var(group):
    g = group(1)
    x, _ = _data(3)
    sym = mx.sym.contrib.PerseusSyncBatchNorm(mx.sym.var("data"), comm_scope=1,
                                              output_mean_var=True, key="k7", name="s")
    assert sym.list_outputs() == ["s_output", "s_mean", "s_var"]
    exe = sym.simple_bind(mx.cpu(), data=x.shape)
    exe.arg_dict["data"][:] = x
    exe.arg_dict["s_gamma"][:] = 1
    exe.arg_dict["s_beta"][:] = 0
    exe.forward(is_train=True)
    np.testing.assert_allclose(exe.outputs[1].asnumpy(), x.mean(axis=(0, 2, 3)), rtol=1e-5)
    np.testing.assert_allclose(exe.outputs[2].asnumpy(), x.var(axis=(0, 2, 3)), rtol=1e-4)
    assert g.calls == [(1, "sync_bn.k7.fwd")]


def test_without_init_is_a_clear_error():
    previous = S.set_allreduce_provider(None)
    try:
        blk = mx.gluon.contrib.nn.PerseusSyncBatchNorm(in_channels=3)
        blk.initialize()
        with pytest.raises(RuntimeError, match="perseus.mxnet.init"):
            with mx.autograd.record():
                blk(mx.nd.ones((2, 3, 2)))
        blk.hybridize()
        with pytest.raises(RuntimeError, match="perseus.mxnet.init"):
            with mx.autograd.record():
                blk(mx.nd.ones((2, 3, 2)))
    finally:
        S.set_allreduce_provider(previous)


_AFTER_CONV = r"""
import mxnet as mx, numpy as np
from perseus.mxnet import sync_batch_norm as S
S.register()
S.set_allreduce_provider(lambda scope: (lambda name, v: v.copy()))  # one rank
def net(norm):
    n = mx.gluon.nn.HybridSequential()
    n.add(mx.gluon.nn.Conv2D(16, 3, padding=1, use_bias=False, in_channels=1), norm(16),
          mx.gluon.nn.Activation("relu"),
          mx.gluon.nn.Conv2D(32, 3, padding=1, use_bias=False, in_channels=16), norm(32))
    n.initialize(mx.init.Xavier())
    n.hybridize()
    return n
mx.random.seed(1)
a = net(lambda c: S.PerseusSyncBatchNorm(in_channels=c, comm_scope=1))
b = net(lambda c: mx.gluon.nn.BatchNorm(in_channels=c))
for pa, pb in zip(a.collect_params().values(), b.collect_params().values()):
    pb.set_data(pa.data())
rng = np.random.RandomState(0)
for step in range(8):
    x = mx.nd.array(rng.rand(8, 1, 12, 12).astype("float32"))
    dy = mx.nd.array(rng.randn(8, 32, 12, 12).astype("float32"))
    train = step % 2 == 0
    got = []
    for n in (a, b):
        if train:
            with mx.autograd.record():
                y = n(x)
            y.backward(dy)
            got.append((y.asnumpy(), n[0].weight.grad().asnumpy()))
        else:
            got.append((n(x).asnumpy(), None))
    np.testing.assert_allclose(got[0][0], got[1][0], rtol=1e-4, atol=1e-4)
    if train:
        scale = np.abs(got[1][1]).max()
        np.testing.assert_allclose(got[0][1] / scale, got[1][1] / scale, atol=1e-5)
print("ok")
"""


def test_after_a_convolution_without_mkldnn_matches_batchnorm():
    """Convolution, then PerseusSyncBatchNorm, hybridized: training steps (outputs and the
    convolution's gradient) alternate with inference steps (outputs).
    MKLDNN off, as docs/sync_bn.md says: with it on, a convolution's blocked output reaches
    any Python CustomOp as wrong memory (garbage or a segfault), which no test can hold."""
    env = dict(os.environ, MXNET_MKLDNN_ENABLED="0",
               PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    result = subprocess.run([sys.executable, "-c", _AFTER_CONV], env=env, capture_output=True,
                            text=True, timeout=50)
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-3000:]
