"""PerseusSyncBatchNorm arithmetic vs MXNet BatchNorm on the concatenated batch.

Ranks are simulated by threads that meet in a summing allreduce; the arithmetic is the one the
operator runs, only the transport differs.
"""
import threading

import mxnet as mx
import numpy as np
import pytest

from perseus.mxnet import sync_bn_math as M

pytestmark = pytest.mark.timeout(60)


class ThreadAllreduce:
    """Blocking sum across `size` threads (one call per thread per round)."""

    def __init__(self, size):
        self.size = size
        self.barrier = threading.Barrier(size, timeout=20)
        self.parts = [None] * size

    def for_rank(self, rank):
        def allreduce(name, vec):
            self.parts[rank] = vec.asnumpy()
            self.barrier.wait()
            total = sum(self.parts)
            self.barrier.wait()
            return mx.nd.array(total, dtype="float64")
        return allreduce


def _reference(x, gamma, beta, dy, eps, fix_gamma, momentum):
    x, gamma, beta = mx.nd.array(x), mx.nd.array(gamma), mx.nd.array(beta)
    mm, mv = mx.nd.zeros(gamma.shape), mx.nd.ones(gamma.shape)
    for a in (x, gamma, beta):
        a.attach_grad()
    with mx.autograd.record():
        y = mx.nd.BatchNorm(x, gamma, beta, mm, mv, eps=eps, momentum=momentum,
                            fix_gamma=fix_gamma)
    y.backward(mx.nd.array(dy))
    return (y.asnumpy(), x.grad.asnumpy(), gamma.grad.asnumpy(), beta.grad.asnumpy(),
            mm.asnumpy(), mv.asnumpy())


def _run_ranks(shards, dy_shards, gamma, beta, eps, fix_gamma, momentum):
    k = len(shards)
    fwd, bwd = ThreadAllreduce(k), ThreadAllreduce(k)
    results = [None] * k
    errors = []

    def rank(r):
        try:
            # zero-size arrays need NumPy shape semantics (thread-local in MXNet)
            mx.util.set_np_shape(True)
            x = mx.nd.array(shards[r])
            g, b = mx.nd.array(gamma), mx.nd.array(beta)
            y, mean, var, invstd, n = M.forward_train(x, g, b, eps, fix_gamma,
                                                      fwd.for_rank(r), "bn0")
            dx, dg, db = M.backward_train(mx.nd.array(dy_shards[r]), x, g, mean, invstd, n,
                                          fix_gamma, bwd.for_rank(r), "bn0")
            mm, mv = mx.nd.zeros(g.shape), mx.nd.ones(g.shape)
            M.update_moving(mm, mv, mean, var, momentum)
            results[r] = [None if a is None else a.asnumpy() for a in (y, dx, dg, db, mm, mv)]
        except Exception as e:  # noqa: BLE001
            errors.append(e)
            fwd.barrier.abort()
            bwd.barrier.abort()

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(k)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    return results


@pytest.mark.parametrize("sizes", [(4, 4), (1, 6, 3), (5, 0, 2)])
@pytest.mark.parametrize("fix_gamma", [False, True])
def test_matches_batchnorm_on_concatenated_batch(sizes, fix_gamma):
    rng = np.random.RandomState(sum(sizes))
    c = 3
    x = rng.randn(sum(sizes), c, 4, 5).astype("float32") * 3 + 7
    dy = rng.randn(*x.shape).astype("float32")
    gamma = rng.rand(c).astype("float32") + 0.5
    beta = rng.randn(c).astype("float32")
    eps, momentum = 1e-5, 0.9
    ref = _reference(x, gamma, beta, dy, eps, fix_gamma, momentum)
    bounds = np.cumsum((0,) + sizes)
    shards = [x[bounds[i]:bounds[i + 1]] for i in range(len(sizes))]
    dys = [dy[bounds[i]:bounds[i + 1]] for i in range(len(sizes))]
    out = _run_ranks(shards, dys, gamma, beta, eps, fix_gamma, momentum)
    nonempty = [r for r, s in enumerate(sizes) if s > 0]
    np.testing.assert_allclose(np.concatenate([out[r][0] for r in nonempty]), ref[0],
                               rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.concatenate([out[r][1] for r in nonempty]), ref[1],
                               rtol=1e-3, atol=1e-4)
    # gamma/beta gradients are per-rank shares; the trainer's allreduce sums them
    np.testing.assert_allclose(sum(o[2] for o in out), ref[2], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(sum(o[3] for o in out), ref[3], rtol=1e-4, atol=1e-4)
    for o in out:  # moving statistics identical everywhere and equal to BatchNorm's
        np.testing.assert_allclose(o[4], ref[4], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(o[5], ref[5], rtol=1e-5, atol=1e-6)


def test_all_ranks_empty_is_a_clear_error():
    ar = ThreadAllreduce(1).for_rank(0)
    with mx.util.np_shape(True), pytest.raises(ValueError, match="empty batch"):
        M.global_stats(mx.nd.zeros((0, 3, 2)), ar, "bn_empty")


def test_large_mean_does_not_cancel():
    rng = np.random.RandomState(0)
    x = (rng.randn(64, 2, 8).astype("float32") * 0.01 + 1000.0)
    ar = ThreadAllreduce(1).for_rank(0)
    mean, var, _ = M.global_stats(mx.nd.array(x), ar, "bn_big")
    np.testing.assert_allclose(var.asnumpy(), x.astype("float64").var(axis=(0, 2)), rtol=1e-2)
