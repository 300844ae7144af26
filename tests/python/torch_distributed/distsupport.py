"""Helpers of the torch.distributed backend tests: running tests/python/torch_distributed/
dist_worker.py under each launcher."""
import shutil
import socket
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from perseus_test_support import job_env, require  # noqa: E402

PY = sys.executable
WORKER = str(Path(__file__).resolve().parent / "dist_worker.py")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(cmd, env=None, timeout=100):
    r = subprocess.run([str(c) for c in cmd], env=env or job_env(), capture_output=True,
                       text=True, timeout=timeout)
    return r, r.stdout + r.stderr


def ok(r, out, marker, count):
    assert r.returncode == 0, "exit %d\n%s" % (r.returncode, out[-8000:])
    assert out.count(marker) == count, out[-8000:]


def perseusrun(np, *worker_args, timeout=100, env=None):
    return run([PY, "-m", "perseus.runner", "-np", np, PY, WORKER] + list(worker_args),
               env=env, timeout=timeout)


def torchrun(np, *worker_args, timeout=100):
    return run([PY, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", np,
                WORKER] + list(worker_args), timeout=timeout)


def mpirun(np, *worker_args, timeout=100):
    require(shutil.which("mpirun"), "Open MPI's mpirun")
    env = job_env()
    forward = [a for k in ("PYTHONPATH", "PERSEUS_BUILD_DIR", "PERSEUS_TIMEOUT",
                           "PERSEUS_START_TIMEOUT") if k in env for a in ("-x", k)]
    return run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", np] + forward +
               [PY, WORKER] + list(worker_args), env=env, timeout=timeout)


def spawn_ranks(np, cmd, timeout=90, **env_vars):
    """np ranks of `cmd` started by hand with RANK/WORLD_SIZE/MASTER_* (what tcp:// and store=
    use): each rank's exit code, and their output joined."""
    env = job_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE=str(np),
                  **env_vars)
    procs = [subprocess.Popen(cmd, env=dict(env, RANK=str(r)), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for r in range(np)]
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=timeout)[0])
        except subprocess.TimeoutExpired:
            p.kill()
            outs.append(p.communicate()[0] + "\n(timed out)")
    return [p.returncode for p in procs], "".join(outs)


def processes(np, *worker_args, timeout=90):
    """np ranks of the worker started by hand (spawn_ranks); the first failing exit code."""
    codes, out = spawn_ranks(np, [PY, WORKER] + list(worker_args), timeout=timeout)
    return subprocess.CompletedProcess([], next((c for c in codes if c), 0)), out


__all__ = ["free_port", "ok", "perseusrun", "torchrun", "mpirun", "processes", "spawn_ranks"]
