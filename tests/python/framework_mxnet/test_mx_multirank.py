"""perseus.mxnet on 2-4 real ranks started by perseusrun (real MXNet 1.9.1, real core).

Each test launches tests/python/framework_mxnet/mx_worker.py <scenario> on every rank; the scenario
asserts on every rank and the job must exit 0 within its timeout (a hang is a failure).
"""
import os
import shutil
import subprocess
import sys

import pytest

import perseus

HERE = os.path.dirname(os.path.abspath(__file__))
# The perseus package these tests import (installed, or the source tree): ranks use the same.
PKG_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(perseus.__file__)))
EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(perseus.__file__)), "examples")


def _core_available():
    try:
        from perseus import _core  # noqa: F401
        return True
    except ImportError:
        return False


pytestmark = pytest.mark.skipif(not _core_available(),
                                reason="perseus._core is not built (pip install . or "
                                       "PERSEUS_BUILD_DIR=<cmake build dir>)")


def start_ranks(np_, scenario, timeout=100, env=None, hosts=None):
    """Runs mx_worker.py <scenario> on np_ ranks; returns the finished process (output in
    stdout, stderr merged into it)."""
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = os.pathsep.join(
        [PKG_PARENT, HERE] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    full_env.setdefault("OMP_NUM_THREADS", "1")
    full_env.setdefault("MXNET_USE_OPERATOR_TUNING", "0")
    full_env.setdefault("PERSEUS_TIMEOUT", "20")
    full_env.update(env or {})
    cmd = [sys.executable, "-m", "perseus.runner", "-np", str(np_),
           "-H", hosts or "localhost:%d" % np_,
           sys.executable, os.path.join(HERE, "mx_worker.py"), scenario]
    return subprocess.run(cmd, env=full_env, cwd=HERE, timeout=timeout,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def run_ranks(np_, scenario, timeout=100, env=None, hosts=None):
    """Runs mx_worker.py <scenario> on np_ ranks, which must all pass; returns the output."""
    proc = start_ranks(np_, scenario, timeout, env, hosts)
    out = proc.stdout
    assert proc.returncode == 0, "rc=%d\n%s" % (proc.returncode, out[-6000:])
    assert out.count("%s OK" % scenario) == np_, out[-6000:]
    return out


@pytest.mark.timeout(120)
def test_a_rank_that_crashes_dies_of_its_signal_with_a_python_stack():
    """Note [MXNet's segfault logger]: the crashed rank dies of SIGSEGV (not MXNet's logger's
    exit 255, nor a hang in it), with faulthandler's Python stack; the launcher names it and
    the signal, and the job ends within its timeout."""
    proc = start_ranks(2, "segfault", env={"PERSEUS_TIMEOUT": "10"})
    out = proc.stdout
    assert proc.returncode != 0, out[-6000:]
    assert "crashing" in out, out[-6000:]
    assert "Fatal Python error: Segmentation fault" in out, out[-6000:]
    assert "in scenario_segfault" in out, out[-6000:]  # the Python stack of the crash
    assert "Segmentation fault: 11" not in out, out[-6000:]  # MXNet's logger did not run
    assert "rank 1" in out and "signal 11" in out, out[-6000:]


@pytest.mark.timeout(150)
@pytest.mark.parametrize("np_", [2, 3])
def test_horovod_api(np_):
    run_ranks(np_, "api")


@pytest.mark.timeout(120)
def test_error_cases_raise_instead_of_hanging():
    run_ranks(2, "errors")


@pytest.mark.timeout(150)
@pytest.mark.parametrize("np_", [2, 3])
def test_kvstore(np_):
    run_ranks(np_, "kvstore")


@pytest.mark.timeout(150)
def test_gluon_training_matches_single_process():
    run_ranks(2, "gluon")


@pytest.mark.timeout(150)
def test_module_fit_with_perseus_kvstore_matches_single_process():
    run_ranks(2, "module")


@pytest.mark.timeout(150)
@pytest.mark.parametrize("np_", [2, 3])
def test_sync_batch_norm_global(np_):
    run_ranks(np_, "syncbn")


@pytest.mark.timeout(150)
def test_sync_batch_norm_empty_batch_on_one_rank():
    run_ranks(3, "syncbn", env={"EMPTY_RANK": "1"})


@pytest.mark.timeout(200)
def test_sync_batch_norm_local_scope_two_hosts():
    run_ranks(4, "syncbn", env={"FAKE_HOSTS": "2"})


@pytest.mark.timeout(200)
def test_mnist_example_runs():
    env = dict(os.environ, PYTHONPATH=PKG_PARENT, OMP_NUM_THREADS="1")
    example = os.path.join(EXAMPLES, "mxnet_mnist.py")
    proc = subprocess.run([sys.executable, "-m", "perseus.runner", "-np", "2", "-H",
                           "localhost:2", sys.executable, example, "--max-batches", "20",
                           "--max-test", "500", "--no-progress"], env=env, timeout=180,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert "accuracy:" in proc.stdout and "throughput:" in proc.stdout


@pytest.mark.timeout(200)
def test_kvstore_fit_example_runs():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([PKG_PARENT, EXAMPLES]),
               OMP_NUM_THREADS="1")
    example = os.path.join(EXAMPLES, "mxnet_kvstore_fit.py")
    proc = subprocess.run([sys.executable, "-m", "perseus.runner", "-np", "2", "-H",
                           "localhost:2", sys.executable, example, "--kv-store",
                           "dist_sync_perseus", "--max-train", "4000"], env=env, timeout=180,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert "accuracy:" in proc.stdout


@pytest.mark.timeout(200)
@pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI's mpirun is not installed")
def test_kvstore_fit_via_mpirun_and_config_sh():
    """The AIACC guide's launch: mpirun starts config.sh, which picks the GPU and runs fit."""
    env = dict(os.environ, PYTHONPATH=PKG_PARENT, OMP_NUM_THREADS="1")
    cmd = ["mpirun", "-np", "2", "--oversubscribe", "-x", "PYTHONPATH"]
    if env.get("PERSEUS_BUILD_DIR"):
        cmd += ["-x", "PERSEUS_BUILD_DIR"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    cmd += [os.path.join(EXAMPLES, "mxnet_kvstore_config.sh"), "--max-train", "4000"]
    proc = subprocess.run(cmd, env=env, timeout=180, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert "accuracy:" in proc.stdout
