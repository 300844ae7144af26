"""The MXNet engine bridge against real MXNet 1.9.1, with dummy asynchronous collectives."""
import ctypes
import os
import subprocess
import sys
import threading
import time

import mxnet as mx
import numpy as np
import pytest

from perseus.mxnet.engine import EngineBridge, bridge

pytestmark = pytest.mark.timeout(60)


def _np(view):
    n = int(np.prod(view.shape)) if view.shape else 1
    buf = (ctypes.c_float * n).from_address(view.data)
    return np.frombuffer(buf, dtype=np.float32).reshape(view.shape)


def _doubling(delay):
    def start(ins, outs, done):
        def later():
            time.sleep(delay)
            _np(outs[0])[...] = _np(ins[0]) * 2
            done(None)
        threading.Thread(target=later).start()
    return start


def test_push_returns_at_once_and_consumers_wait():
    x = mx.nd.ones((4,)) * 5
    y = mx.nd.zeros((4,))
    t0 = time.time()
    op = bridge().push(_doubling(0.3), [x], [y], name="double")
    assert time.time() - t0 < 0.2
    z = y + 1  # queued behind the collective by the engine
    np.testing.assert_allclose(z.asnumpy(), 11)
    op.wait(5)


def test_collective_waits_for_its_producer():
    seen = []

    def start(ins, outs, done):
        seen.append(_np(ins[0]).copy())
        done(None)

    a = mx.nd.random.uniform(shape=(300, 300))
    x = mx.nd.dot(a, a)  # still running when the collective is pushed
    for _ in range(5):
        x = x * 1.0001
    bridge().push(start, [x], [], name="reader").wait(10)
    np.testing.assert_allclose(seen[0], x.asnumpy(), rtol=1e-6)


def test_in_place_array_passed_once():
    x = mx.nd.ones((3,))
    bridge().push(_doubling(0.0), [x], [x], name="inplace")
    np.testing.assert_allclose(x.asnumpy(), 2)


def test_error_poisons_outputs_as_mxnet_error():
    def fail(ins, outs, done):
        threading.Timer(0.05, lambda: done("peer rank 1 lost; check its log")).start()
    w = mx.nd.zeros((2,))
    op = bridge().push(fail, [], [w], name="bad")
    with pytest.raises(mx.base.MXNetError, match="peer rank 1 lost"):
        (w + 1).asnumpy()
    with pytest.raises(mx.base.MXNetError, match="peer rank 1 lost"):
        op.wait(5)


def test_exception_in_start_reaches_mxnet():
    def broken(ins, outs, done):
        raise ValueError("shape mismatch on tensor t")
    w = mx.nd.zeros((2,))
    bridge().push(broken, [], [w], name="broken")
    with pytest.raises(mx.base.MXNetError, match="shape mismatch on tensor t"):
        w.asnumpy()


_PRIORITY_SCRIPT = r"""
import sys, threading
sys.path.insert(0, sys.argv[1])
import mxnet as mx
from perseus.mxnet.engine import bridge
gate, started, order = threading.Event(), threading.Event(), []
# The only kCPUPrioritized worker (MXNET_CPU_PRIORITY_NTHREADS=1) is held until `gate`, so
# the next pushes queue up and must start highest priority first. They are pushed once the
# blocker runs: pushed before, the first of them could take the worker ahead of it.
blocker = bridge().push(lambda i, o, done: (started.set(), gate.wait(), done(None)), [],
                        [mx.nd.zeros((1,))], name="blocker")
assert started.wait(10), "the blocker never started"
ops = [bridge().push(lambda i, o, done, p=p: (order.append(p), done(None)), [],
                     [mx.nd.zeros((1,))], priority=p, name="p%d" % p) for p in [1, 5, 3, 9, 7]]
gate.set()
for op in [blocker] + ops:
    op.wait(10)
print(order)
"""


def test_priority_orders_ready_collectives():
    env = dict(os.environ, MXNET_CPU_PRIORITY_NTHREADS="1")
    import perseus
    root = os.path.dirname(os.path.dirname(os.path.abspath(perseus.__file__)))
    out = subprocess.run([sys.executable, "-c", _PRIORITY_SCRIPT, root], env=env, timeout=50,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[9, 7, 5, 3, 1]"


def test_fallback_without_engine():
    b = EngineBridge(use_engine=False)
    x = mx.nd.ones((3,)) * 2
    y = mx.nd.zeros((3,))
    b.push(_doubling(0.05), [x], [y], name="sync")
    np.testing.assert_allclose(y.asnumpy(), 4)


_NAIVE_SCRIPT = r"""
import sys, threading
sys.path.insert(0, sys.argv[1])
import mxnet as mx
from perseus.mxnet.engine import bridge
y = mx.nd.zeros((2,))
def later(ins, outs, done):
    threading.Timer(0.1, lambda: done(None)).start()
bridge().push(later, [], [y], name="ok")
def fail(ins, outs, done):
    threading.Timer(0.1, lambda: done("rank 3 lost")).start()
try:
    bridge().push(fail, [], [mx.nd.zeros((2,))], name="bad")
except mx.base.MXNetError as e:
    print("raised:", e)
"""


def test_naive_engine_completes_and_raises_at_push():
    # NaiveEngine runs the op inline and drops on_complete's error: push raises it instead.
    import perseus
    root = os.path.dirname(os.path.dirname(os.path.abspath(perseus.__file__)))
    env = dict(os.environ, MXNET_ENGINE_TYPE="NaiveEngine")
    out = subprocess.run([sys.executable, "-c", _NAIVE_SCRIPT, root], env=env, timeout=50,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "raised: rank 3 lost" in out.stdout
