"""The mpirun paths: perseusrun --mpi, and plain mpirun (the core reads OMPI_*)."""

import shutil
import subprocess
import sys

import pytest

from perseus_test_support import job_env, perseusrun, require

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(autouse=True)
def _open_mpi():
    require(shutil.which("mpirun"), "Open MPI's mpirun")

CODE = ("import numpy as np; from perseus import _core; _core.init(); t = _core.topology();"
        "a = np.full(2, t['rank'] + 1.0, dtype=np.float32); _core.allreduce('x', a).wait();"
        "print('rank %d size %d %s' % (t['rank'], t['size'], a.tolist()))")


def test_perseusrun_mpi():
    r = perseusrun(["--mpi", "-np", 2, sys.executable, "-c", CODE])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "[0]<stdout>:rank 0 size 2 [1.5, 1.5]" in r.stdout
    assert "[1]<stdout>:rank 1 size 2 [1.5, 1.5]" in r.stdout


def test_perseusrun_mpi_failure_exit_code():
    r = perseusrun(["--mpi", "-np", 2, sys.executable, "-c",
                    "import os,sys,time\nif os.environ['OMPI_COMM_WORLD_RANK']=='1': sys.exit(7)\n"
                    "time.sleep(60)"])
    assert r.returncode == 7, r.stderr


def test_plain_mpirun():
    env = job_env()
    r = subprocess.run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2"] +
                       [a for k in ("PYTHONPATH", "PERSEUS_BUILD_DIR") if k in env
                        for a in ("-x", k)] + [sys.executable, "-c", CODE],
                       env=env, capture_output=True, text=True, timeout=90)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "rank 0 size 2 [1.5, 1.5]" in r.stdout and "rank 1 size 2 [1.5, 1.5]" in r.stdout
