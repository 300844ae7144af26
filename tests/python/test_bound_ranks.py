"""Ranks bound to cores by the launcher, not by Perseus: the shared-memory waiters of a host spin
when its ranks have a CPU each and yield their core when ranks share one, whoever bound them
(Note [Binding ranks to cores], src/transport/shm/cpu_budget.h). Each rank's debug log says
which it chose."""
import os
import shutil
import subprocess
import sys

import pytest

from perseus_test_support import job_env, perseusrun, require

pytestmark = pytest.mark.timeout(120)

CODE = ("import os, numpy as np; from perseus import _core; _core.init();"
        "a = np.ones(2, dtype=np.float32); _core.allreduce('x', a).wait();"
        "print('cpus', sorted(os.sched_getaffinity(0)))")


@pytest.fixture(autouse=True)
def _two_cpus():
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 usable CPUs to bind 2 ranks apart")


def _decisions(output):
    return [line for line in output.splitlines() if "waiters " in line]


def _expect(result, decision):
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    found = _decisions(out)
    assert len(found) == 2 and all(decision in line for line in found), out


def test_ranks_mpirun_binds_to_a_core_each_spin():
    require(shutil.which("mpirun"), "Open MPI's mpirun")
    env = job_env(PERSEUS_LOG_LEVEL="debug")
    r = subprocess.run(["mpirun", "--allow-run-as-root", "--bind-to", "core", "-np", "2"] +
                       [a for k in ("PYTHONPATH", "PERSEUS_BUILD_DIR", "PERSEUS_LOG_LEVEL")
                        if k in env for a in ("-x", k)] + [sys.executable, "-c", CODE],
                       env=env, capture_output=True, text=True, timeout=90)
    if r.returncode != 0 and "slots" in r.stdout + r.stderr:
        pytest.skip("mpirun counts fewer than 2 cores here")
    masks = [line for line in r.stdout.splitlines() if line.startswith("cpus")]
    if r.returncode == 0 and len(masks) == 2 and masks[0] == masks[1]:
        pytest.skip("mpirun did not bind the ranks here: %s" % masks[0])
    _expect(r, "waiters spin")


def test_ranks_perseusrun_binds_spin():
    _expect(perseusrun(["-np", 2, sys.executable, "-c", CODE],
                       env=job_env(PERSEUS_LOG_LEVEL="debug")), "waiters spin")


def test_ranks_bound_to_one_cpu_together_yield():
    cpu = str(min(os.sched_getaffinity(0)))
    _expect(perseusrun(["--bind-to", "none", "-np", 2, "taskset", "-c", cpu, sys.executable, "-c",
                        CODE], env=job_env(PERSEUS_LOG_LEVEL="debug")), "waiters yield")
