"""Real launchers on one host: perseusrun and Open MPI's mpirun as the reference, torchrun (from the installed torch; standalone, c10d, and as a
Kubeflow PyTorchJob configures it through PET_* variables), MPICH's Hydra mpiexec and Intel
MPI's (each by its own path: Open MPI stays the default mpirun), and the loud failures: a job
that cannot form raises at init() naming the launcher; it never runs as size 1."""
import os
import re
import shutil
import socket
import subprocess
import sys

import pytest

from launchsupport import (MPIEXEC_IMPI, MPIRUN_IMPI, TEST_SECRET, WORKER, check_job, python_env,
                           require, require_intel_mpi)

pytestmark = pytest.mark.timeout(120)
PY = sys.executable
TORCHRUN = [PY, "-m", "torch.distributed.run"]
MPIEXEC_MPICH = "/usr/bin/mpiexec.mpich"


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(cmd, env, timeout=90):
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    return r, r.stdout + r.stderr


def test_torchrun_standalone_with_perseus_torch():
    r, out = _run(TORCHRUN + ["--standalone", "--nproc-per-node", "2", WORKER, "--api", "torch"],
                  python_env(PERSEUS_SECRET=TEST_SECRET))
    assert r.returncode == 0, out
    check_job(out, [2])


def test_torchrun_c10d_rendezvous():
    port = _free_port()
    r, out = _run(TORCHRUN + ["--nnodes", "1", "--nproc-per-node", "3", "--rdzv-backend", "c10d",
                              "--rdzv-endpoint", "127.0.0.1:%d" % port, "--rdzv-id", "job1",
                              WORKER], python_env(PERSEUS_SECRET=TEST_SECRET))
    assert r.returncode == 0, out
    check_job(out, [3])


def test_pytorchjob_environment(tmp_path):
    """What Kubeflow's training operator gives a PyTorchJob's pods: PET_* variables that
    torchrun reads as its arguments, and the secret from a mounted file (PERSEUS_SECRET_FILE)."""
    secret = tmp_path / "secret"
    secret.write_text(TEST_SECRET + "\n")
    secret.chmod(0o600)
    env = python_env(PET_NNODES="1", PET_NPROC_PER_NODE="2", PET_NODE_RANK="0",
                     PET_MASTER_ADDR="127.0.0.1", PET_MASTER_PORT=str(_free_port()),
                     PERSEUS_SECRET_FILE=str(secret))
    r, out = _run(TORCHRUN + [WORKER], env)
    assert r.returncode == 0, out
    check_job(out, [2])


def _pods(n, *args, **env):
    """n processes with only the variables a PyTorchJob gives pods that run the script
    directly: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT. Returns (exit codes, output)."""
    env.setdefault("MASTER_PORT", str(_free_port()))
    procs = [subprocess.Popen([PY, WORKER] + list(args), env=python_env(
        RANK=str(r), WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1", PERSEUS_SECRET=TEST_SECRET,
        **env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(n)]
    out = "".join(p.communicate(timeout=60)[0] for p in procs)
    return [p.returncode for p in procs], out


def test_pytorchjob_without_torchrun():
    """No LOCAL_*: the placement comes from the host names."""
    codes, out = _pods(2)
    assert codes == [0, 0], out
    check_job(out, [2])


def test_fixed_store_port_and_data_port_range():
    """PERSEUS_PORT fixes the store's port, PERSEUS_PORT_RANGE the data-plane listeners'
    (over TCP here, so that the ranks' connections show the listeners' ports)."""
    lo = _free_port()
    store = _free_port()
    codes, out = _pods(3, "--ports", PERSEUS_PORT=str(store), PERSEUS_CPU_OPERATIONS="tcp",
                       PERSEUS_PORT_RANGE="%d-%d" % (lo, lo + 20))
    assert codes == [0, 0, 0], out
    res = check_job(out, [3])
    assert [10, store, 0] in res[0]["tcp"], res[0]
    for rank, rec in res.items():
        data = [(l, r) for state, l, r in rec["tcp"] if state == 1 and store not in (l, r)]
        # Each pair of ranks is connected (PERSEUS_TCP_CONNECTIONS sockets); one end of each
        # connection is a listener's port.
        assert len(data) >= 2, (rank, rec["tcp"])
        assert all(lo <= l <= lo + 20 or lo <= r <= lo + 20 for l, r in data), (rank, rec["tcp"])


def test_a_taken_derived_store_port_moves_to_the_next():
    """Note [Derived store port]: something else listens on MASTER_PORT+1 (and answers nothing,
    the hardest case for the other ranks): rank 0 opens the store on the next port, and the
    others find it there."""
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        codes, out = _pods(2, MASTER_PORT=str(taken - 1))
    assert codes == [0, 0], out
    check_job(out, [2])


def test_ports_that_are_taken_fail_loudly():
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        port = busy.getsockname()[1]
        codes, out = _pods(2, PERSEUS_PORT=str(port), PERSEUS_START_TIMEOUT="5")
        assert codes[0] != 0 and "set PERSEUS_PORT to a free port" in out, out
        codes, out = _pods(2, PERSEUS_PORT_RANGE="%d-%d" % (port, port),
                           PERSEUS_START_TIMEOUT="5")
        assert codes != [0, 0] and "PERSEUS_PORT_RANGE" in out, out
    assert "PERSEUS_RESULT" not in out, out


def test_torchrun_without_secret_fails_at_init():
    env = python_env(HOME=str(os.path.dirname(WORKER)))  # no ~/.perseus/secret there
    r, out = _run(TORCHRUN + ["--standalone", "--nproc-per-node", "2", WORKER], env)
    assert r.returncode != 0, out
    assert "torchrun hands out no secret" in out and "PERSEUS_SECRET" in out, out
    assert "PERSEUS_RESULT" not in out, out


def test_mpich_hydra_one_host():
    require(os.path.exists(MPIEXEC_MPICH), "Debian's mpich (its mpiexec at %s)" % MPIEXEC_MPICH)
    r, out = _run([MPIEXEC_MPICH, "-n", "3", PY, WORKER], python_env())
    assert r.returncode == 0, out
    check_job(out, [3])


@pytest.mark.parametrize("mpiexec", [MPIEXEC_IMPI, MPIRUN_IMPI], ids=["mpiexec.hydra", "mpirun"])
def test_intel_mpi_hydra_one_host(mpiexec):
    """Intel MPI's Hydra (pip's impi-rt) gives the MPICH variables and PMI_FD; its mpirun is a
    script around mpiexec.hydra. No secret, and no Intel MPI library in the ranks."""
    require_intel_mpi()
    r, out = _run([mpiexec, "-n", "3", PY, WORKER], python_env())
    assert r.returncode == 0, out
    check_job(out, [3])


def test_intel_mpi_without_pmi_socket_fails_at_init():
    """A wrapper between mpiexec and Python that closes the inherited PMI socket: init()
    names the launcher, PMI_FD and the variables seen, on every rank."""
    require_intel_mpi()
    code = ("import os, runpy, sys\nos.close(int(os.environ['PMI_FD']))\n"
            "sys.argv = [%r]\nrunpy.run_path(%r, run_name='__main__')\n" % (WORKER, WORKER))
    r, out = _run([MPIEXEC_IMPI, "-n", "2", PY, "-c", code], python_env())
    assert r.returncode != 0, out
    # Both ranks write to one stream, so one rank's traceback can land between the other's
    # exception name and its message: count the messages, and each rank's variables.
    assert "InvalidArgumentError" in out, out
    assert out.count("started by MPICH's (or Intel MPI's) mpiexec: PMI_FD=") == 2, out
    assert out.count("is not the PMI socket") == 2 and "PMI_SIZE=2" in out, out
    assert "PMI_RANK=0," in out and "PMI_RANK=1," in out, out
    assert "PERSEUS_RESULT" not in out, out


def test_perseusrun_one_host():
    r, out = _run([PY, "-m", "perseus.runner", "-np", "3", PY, WORKER], python_env())
    assert r.returncode == 0, out
    check_job(out, [3])


def test_open_mpi_one_host():
    require(shutil.which("mpirun"), "Open MPI's mpirun")
    env = python_env()
    forward = [a for k in ("PYTHONPATH", "PERSEUS_BUILD_DIR") if k in env for a in ("-x", k)]
    r, out = _run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "3"] + forward +
                  [PY, WORKER], env)
    assert r.returncode == 0, out
    check_job(out, [3])


def test_open_mpi_stays_the_default():
    require(shutil.which("mpirun"), "Open MPI's mpirun")
    version = subprocess.run(["mpirun", "--version"], capture_output=True, text=True).stdout
    assert "Open MPI" in version, version


# What horovodrun 0.28 (Gloo mode) gives each worker (horovod/runner/gloo_run.py).
HOROVODRUN_GLOO = {
    "HOROVOD_RANK": "0", "HOROVOD_SIZE": "2", "HOROVOD_LOCAL_RANK": "0", "HOROVOD_LOCAL_SIZE": "2",
    "HOROVOD_CROSS_RANK": "0", "HOROVOD_CROSS_SIZE": "1", "HOROVOD_HOSTNAME": "localhost",
    "HOROVOD_CONTROLLER": "gloo", "HOROVOD_CPU_OPERATIONS": "gloo",
    "HOROVOD_GLOO_RENDEZVOUS_ADDR": "127.0.0.1", "HOROVOD_GLOO_RENDEZVOUS_PORT": "29400"}


@pytest.mark.parametrize("env, launcher, seen", [
    ({"RANK": "0", "WORLD_SIZE": "2"}, "torchrun", "WORLD_SIZE=2"),
    ({"PMIX_RANK": "0", "PMIX_NAMESPACE": "prte@1"}, "PMIx", "PMIX_RANK=0"),
    ({"PMI_RANK": "0", "PMI_SIZE": "2", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "2"},
     "mpiexec", "PMI_SIZE=2"),
    # What horovodrun 0.28's elastic mode gives each worker: ranks come from its driver.
    (dict(HOROVODRUN_GLOO, HOROVOD_ELASTIC="1"), "horovodrun", "perseusrun -np 2 "),
    # horovodrun's placement without its rendezvous server (a hand-made environment).
    ({k: v for k, v in HOROVODRUN_GLOO.items() if "RENDEZVOUS" not in k}, "horovodrun",
     "perseusrun -np 2 "),
])
def test_job_that_cannot_form_raises(env, launcher, seen):
    # perseus.torch for torchrun's variables (the user's import); the cheaper _core otherwise.
    module = "perseus.torch" if launcher == "torchrun" else "perseus._core"
    code = ("import %s as hvd\ntry:\n    hvd.init()\nexcept ValueError as e:\n"
            "    print(type(e).__name__, e)\nelse:\n    print('joined')\n" % module)
    r, out = _run([PY, "-c", code], python_env(**env), timeout=60)
    assert r.stdout.strip() != "joined", out
    assert "InvalidArgumentError" in out and launcher in out and seen in out, out


@pytest.mark.parametrize("env, seen, line", [
    ({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "2", "SLURM_PROCID": "0"}, "SLURM_NTASKS=2",
     "srun %s -c" % PY),
    ({"PMI_RANK": "0", "PMI_SIZE": "2"}, "PMI_SIZE=2", "mpiexec -n 2 %s -c" % PY),
])
def test_job_announced_without_a_launcher_warns_once(env, seen, line):
    """A batch script may run Python directly (one process), so it runs, but says what it saw
    and the launch line that would use every task."""
    code = "import perseus._core as c; c.init(); print('size', c.topology()['size']); c.shutdown()"
    r, out = _run([PY, "-c", code], python_env(**env), timeout=60)
    assert r.returncode == 0 and "size 1" in r.stdout, out
    assert r.stderr.count(seen) == 1 and line in r.stderr, out


REINIT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reinit_worker.py")


def _reinit_command(launcher, env):
    if launcher == "perseusrun":
        return [PY, "-m", "perseus.runner", "-np", "2"]
    if launcher == "torchrun":
        return TORCHRUN + ["--standalone", "--nproc-per-node", "2"]
    require(shutil.which("mpirun"), "Open MPI's mpirun")
    forward = [a for k in ("PYTHONPATH", "PERSEUS_BUILD_DIR") if k in env for a in ("-x", k)]
    return ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2"] + forward


@pytest.mark.parametrize("launcher, api", [("perseusrun", "torch"), ("torchrun", "torch"),
                                           ("mpirun", "torch"), ("perseusrun", "mxnet")])
def test_init_after_shutdown_rejoins_the_job(launcher, api):
    """init() after shutdown() in the same process: the same rank and size, and collectives
    work again (what ShutDownError tells the user to do)."""
    if api == "mxnet":
        from perseus_test_support import require_mxnet
        require_mxnet()
    env = python_env(PERSEUS_SECRET=TEST_SECRET)
    program = [REINIT] if launcher == "torchrun" else [PY, REINIT]  # torchrun runs a script
    r, out = _run(_reinit_command(launcher, env) + program + ["--api", api], env)
    assert r.returncode == 0, out
    lines = sorted(re.findall(r"REINIT (\d+ \d+ \S+ \d+)", out))
    assert lines == ["0 2 3 21", "1 2 3 21"], out
