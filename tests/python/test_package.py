"""The package itself: cheap import, examples folder, exceptions, single-process use."""

import os
import subprocess
import sys

import pytest

from perseus_test_support import job_env

pytestmark = pytest.mark.timeout(60)


def _python(code):
    return subprocess.run([sys.executable, "-c", code], env=job_env(), capture_output=True,
                          text=True, timeout=60)


def test_import_is_quiet_and_framework_free():
    r = _python("import sys, perseus, perseus.common, perseus.runner.launch; "
                "print(sorted(m for m in sys.modules if m.split('.')[0] in "
                "('torch', 'mxnet', 'numpy', 'perseus._core')))")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "[]\n" and r.stderr == ""


def test_package_folder_has_examples():
    r = _python("import perseus; print(perseus)")
    folder = r.stdout.split("'")[3].replace("__init__.py", "")
    assert os.path.isfile(os.path.join(folder, "examples", "torch_mnist.py"))


def test_exception_hierarchy():
    from perseus.common import exceptions as ex
    assert ex.HorovodInternalError is ex.PerseusInternalError
    assert issubclass(ex.PerseusInternalError, RuntimeError)
    for code, base in ((1, ValueError), (2, ValueError), (3, RuntimeError), (3, ValueError),
                       (4, ex.PerseusInternalError), (5, ex.PerseusInternalError),
                       (6, ValueError), (7, ValueError), (8, ex.PerseusInternalError),
                       (9, RuntimeError)):
        assert issubclass(ex.exception_for_status(code), base), (code, base)


def test_single_process_without_launcher():
    code = ("import numpy as np, perseus.torch as hvd, torch; hvd.init(); "
            "assert (hvd.rank(), hvd.size(), hvd.local_size()) == (0, 1, 1); "
            "print(hvd.allreduce(torch.ones(2), op=hvd.Sum).tolist(), "
            "hvd.allgather(torch.ones(1)).tolist(), hvd.broadcast_object('o'))")
    env = {k: v for k, v in job_env().items() if not k.startswith(("PERSEUS_RANK", "OMPI_"))}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "[1.0, 1.0] [1.0] o\n"


def test_numpy_buffers_and_handles():
    code = r"""
import numpy as np
from perseus import _core
from perseus.common.exceptions import InvalidArgumentError, UnsupportedError
_core.init()
a = np.arange(6, dtype=np.float32).reshape(2, 3)
import time
t0 = time.perf_counter()
h = _core.allreduce('np', a, None, 0)
assert h.wait(5.0) and h.poll() and h.done and h.status == 0
submitted, completed = h.times()  # the engine's stamps, on perf_counter's clock
assert t0 <= submitted <= completed <= time.perf_counter(), (t0, submitted, completed)
h = _core.allgather('g', np.arange(3, dtype=np.int64))
h.wait()
out = h.output(0)
del h  # the array keeps the handle alive
assert out.tolist() == [0, 1, 2]
caps = _core.allgather('g2', np.ones(2, dtype=np.bool_))
caps.wait()
assert type(caps.output(0, as_dlpack=True)).__name__ == 'PyCapsule'
for bad, exc in ((np.ones(3, dtype=np.uint32), UnsupportedError),
                 (np.ones((3, 3))[:, 0], InvalidArgumentError)):
    try:
        _core.allreduce('bad', bad, None, 0)
        raise SystemExit('accepted %r' % bad)
    except exc:
        pass
called = []
h = _core.barrier(0)
h.set_callback(called.append)
h.wait()
import time
end = time.time() + 5
while not called and time.time() < end:
    time.sleep(0.01)
assert called == [0], called
print('ok')
"""
    r = _python(code)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "ok\n"


def test_callbacks_run_in_one_python_thread_state():
    """The dispatcher thread calls every completion callback in one Python thread state: what a
    callback keeps in a threading.local is there for the next one (a state per callback would
    start each from scratch, and make and delete a state on every completion)."""
    code = """
import threading, time
from perseus import _core
_core.init()
local = threading.local()
seen = []
def callback(status):
    seen.append(getattr(local, "calls", 0))
    local.calls = getattr(local, "calls", 0) + 1
for i in range(3):
    h = _core.barrier(0)
    h.set_callback(callback)
    h.wait()
    end = time.time() + 5
    while len(seen) < i + 1 and time.time() < end:
        time.sleep(0.01)
assert seen == [0, 1, 2], seen
print('ok')
"""
    r = _python(code)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "ok\n"
