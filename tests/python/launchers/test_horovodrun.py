"""An unchanged horovodrun line (Horovod 0.28.1, Gloo mode) runs as one Perseus job: the ranks
meet through horovodrun's own HTTP rendezvous server (Note [horovodrun rendezvous]). horovodrun
is Horovod's real runner from its source distribution (horovodrun_unbuilt.py says what it
skips); its MPI mode runs mpirun, joined as such; its elastic mode is refused with the
perseusrun line (test_launchers_local.py)."""
import os
import re
import shutil
import subprocess
import sys

import pytest

from launchsupport import WORKER, check_job, python_env, require

pytestmark = pytest.mark.timeout(150)
PY = sys.executable
HERE = os.path.dirname(os.path.abspath(__file__))
HOROVOD_SRC = os.environ.get("PERSEUS_HOROVOD_SRC", "/opt/horovod-0.28.1")


def _horovodrun(args, timeout=120):
    present = os.path.isfile(os.path.join(HOROVOD_SRC, "horovod", "runner", "launch.py"))
    require(present, "Horovod 0.28.1's runner source at %s (PERSEUS_HOROVOD_SRC)" % HOROVOD_SRC)
    env = python_env()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (HOROVOD_SRC, env.get("PYTHONPATH")) if p)
    for k in [k for k in env if k.startswith("HOROVOD_")]:
        del env[k]
    r = subprocess.run([PY, os.path.join(HERE, "horovodrun_unbuilt.py")] + args, env=env,
                       capture_output=True, text=True, timeout=timeout, cwd=HERE)
    return r, r.stdout + r.stderr


def test_horovodrun_gloo_mode_forms_one_job():
    r, out = _horovodrun(["--gloo", "-np", "2", "-H", "localhost:2", PY, WORKER, "--api", "torch"])
    assert r.returncode == 0, out
    check_job(out, [2])
    # horovodrun's own HOROVOD_CONTROLLER/HOROVOD_CPU_OPERATIONS are no user's request.
    assert "has no effect" not in out, out


def test_horovodrun_mpi_mode_forms_one_job():
    """horovodrun --mpi runs Open MPI's mpirun, whose ranks Perseus joins as under mpirun."""
    require(shutil.which("mpirun"), "Open MPI's mpirun")
    r, out = _horovodrun(["--mpi", "-np", "2", "-H", "localhost:2",
                          "--mpi-args=--allow-run-as-root --oversubscribe", PY, WORKER])
    assert r.returncode == 0, out
    check_job(out, [2])


def test_init_after_shutdown_rejoins_under_horovodrun():
    r, out = _horovodrun(["--gloo", "-np", "2", "-H", "localhost:2", PY,
                          os.path.join(HERE, "reinit_worker.py"), "--api", "torch"])
    assert r.returncode == 0, out
    lines = sorted(re.findall(r"REINIT (\d+ \d+ \S+ \d+)", out))
    assert lines == ["0 2 3 21", "1 2 3 21"], out
