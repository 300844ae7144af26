"""Every launcher across two hosts (network namespaces with their own addresses, host names
and sshd: tests/python/multihost/netns_hosts.py), 2 ranks on each: torchrun with a static and
a c10d rendezvous, MPICH's and Intel MPI's Hydra mpiexec over ssh, Open MPI's mpirun with a
hostfile (what a Kubeflow MPIJob runs), and a real Slurm (slurmctld, one slurmd per host,
munge) with srun, sbatch, perseusrun and Intel MPI's mpirun inside an allocation. Each job
must match perseusrun's topology for the same placement; Slurm is stopped afterwards."""
import os
import shutil
import subprocess
import sys
import time

import pytest

from launchsupport import (MPIRUN_IMPI, TEST_SECRET, WORKER, check_job, python_env,
                           require, require_intel_mpi, results)

netns_hosts = pytest.importorskip("netns_hosts")
import slurm_cluster  # noqa: E402
from multihost_launch import MPIEXEC_MPICH, MultiHostLaunchers  # noqa: E402

pytestmark = [pytest.mark.timeout(150),
              pytest.mark.skipif(not netns_hosts.available(),
                                 reason="needs root, network namespaces (ip netns) and sshd")]
PY = sys.executable


@pytest.fixture(scope="module")
def net():
    with netns_hosts.VirtualCluster(["h1", "h2"], own_hostnames=True) as c:
        yield c


@pytest.fixture(scope="module")
def launchers(net):
    return MultiHostLaunchers(net)


def _check(launch, hosts):
    assert launch.returncode == 0, launch.output[-8000:]
    return check_job(launch.output, [2, 2], hosts)


def test_perseusrun(launchers, net):
    _check(launchers.perseusrun(), ["h1", "h1", "h2", "h2"])


def test_torchrun_static_rendezvous(launchers):
    _check(launchers.torchrun_static(port=29510), ["h1", "h1", "h2", "h2"])


def test_torchrun_c10d_rendezvous(launchers):
    launch = launchers.torchrun_c10d(port=29410)
    res = _check(launch, None)
    # c10d may make either host group 0; ranks stay in blocks of 2 per host.
    assert res[0]["host"] == res[1]["host"] != res[2]["host"] == res[3]["host"], res


def test_mpich_hydra_across_hosts(launchers):
    require(os.path.exists(MPIEXEC_MPICH), "Debian's mpich (its mpiexec at %s)" % MPIEXEC_MPICH)
    _check(launchers.mpiexec_mpich(), ["h1", "h1", "h2", "h2"])


def test_intel_mpi_hydra_across_hosts(launchers):
    """Intel MPI's mpiexec.hydra, -bootstrap ssh and -ppn 2; the secret comes through PMI."""
    require_intel_mpi()
    _check(launchers.mpiexec_impi(), ["h1", "h1", "h2", "h2"])


def test_open_mpi_hostfile_across_hosts(launchers):
    require(shutil.which("mpirun"), "Open MPI's mpirun")
    _check(launchers.mpirun(), ["h1", "h1", "h2", "h2"])


# --- Slurm ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def slurm(net):
    require(slurm_cluster.available(), "slurmctld, slurmd and munge")
    with slurm_cluster.SlurmCluster(net) as s:
        yield s


@pytest.mark.parametrize("mpi", ["none", "pmi2"])
def test_srun(net, slurm, mpi):
    """srun without and with its pmi2 plugin, which adds PMI_FD/PMI_RANK/PMI_SIZE: those must
    not hide the step's SLURM_* variables. (Debian's mpi/pmix plugin does not launch steps in
    this set-up, with or without Perseus.)"""
    _check(MultiHostLaunchers(net, slurm).srun("--mpi=" + mpi), ["pn01", "pn01", "pn02", "pn02"])


def test_srun_one_node(slurm):
    r = slurm.run(["srun", "-N", "1", "-n", "2", PY, WORKER], check=False, timeout=90,
                  env=slurm.env(**python_env(PERSEUS_SECRET=TEST_SECRET)))
    assert r.returncode == 0, r.stdout + r.stderr
    # Slurm picks the node: pn02 when pn01 is still completing the previous test's job.
    hosts = {rec["host"] for rec in check_job(r.stdout, [2]).values()}
    assert len(hosts) == 1 and hosts <= {"pn01", "pn02"}, hosts


def test_srun_torch_distributed_perseus_rendezvous(slurm):
    """init_process_group("perseus", init_method="perseus://") under srun across two nodes:
    Slurm's variables form the job, and rank 0's TCPStore is reached by its node name."""
    worker = os.path.join(os.path.dirname(os.path.dirname(WORKER)), "torch_distributed",
                          "dist_worker.py")
    r = slurm.run(["srun", "-N", "2", "--ntasks-per-node", "1", PY, worker, "launch@perseus"],
                  check=False, timeout=120,
                  env=slurm.env(**python_env(PERSEUS_SECRET=TEST_SECRET)))
    out = r.stdout + r.stderr
    assert r.returncode == 0 and out.count("LAUNCH OK") == 2, out[-8000:]


def test_srun_without_secret_fails_at_init(slurm):
    r = slurm.run(["srun", "-N", "2", "--ntasks-per-node", "2", PY, WORKER], check=False,
                  env=slurm.env(**python_env(HOME=slurm.tmp)), timeout=90)
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    assert "Slurm's srun hands out no secret" in out, out
    assert "PERSEUS_RESULT" not in out, out


def _sbatch(slurm, script, **env):
    path = os.path.join(slurm.tmp, "job.sh")
    with open(path, "w") as f:
        f.write("#!/bin/sh\n" + script + "\n")
    out = os.path.join(slurm.tmp, "job-%j.out")
    r = slurm.run(["sbatch", "--parsable", "-N", "2", "--ntasks-per-node", "2", "-o", out, path],
                  env=slurm.env(**python_env(**env)), timeout=30)
    job_id = r.stdout.strip().split(";")[0]
    slurm.wait_job(job_id)
    with open(out.replace("%j", job_id)) as f:
        return f.read()


def test_sbatch_with_srun(slurm):
    text = _sbatch(slurm, "exec srun %s %s" % (PY, WORKER), PERSEUS_SECRET=TEST_SECRET)
    check_job(text, [2, 2], ["pn01", "pn01", "pn02", "pn02"])


def test_perseusrun_in_allocation_takes_its_hosts(slurm, net):
    """perseusrun with no -np/-H inside sbatch: the allocation's nodes (pn[01-02]) and tasks
    (2(x2)); the ranks on pn02 are started through ssh (its sshd runs as host h2)."""
    ssh = " ".join(net.perseusrun_args())
    text = _sbatch(slurm, "exec %s -m perseus.runner --verbose %s %s %s" % (PY, ssh, PY, WORKER))
    assert "Slurm allocation" in text and "pn01:2,pn02:2" in text, text
    check_job(text, [2, 2], ["pn01", "pn01", "h2", "h2"])


def test_intel_mpi_mpirun_in_allocation(slurm):
    """Intel MPI's mpirun in an sbatch script, with neither -n nor hosts: it takes them from
    the allocation and starts its proxies with srun (one task per node). The ranks see that
    step's SLURM_PROCID/SLURM_STEP_NUM_TASKS too, which must not hide Hydra's PMI_*."""
    require_intel_mpi()
    text = _sbatch(slurm, "%s sh -c 'echo STEP_TASKS=$SLURM_STEP_NUM_TASKS'\nexec %s %s %s"
                   % (MPIRUN_IMPI, MPIRUN_IMPI, PY, WORKER))
    assert text.count("STEP_TASKS=2") == 4, text
    check_job(text, [2, 2], ["pn01", "pn01", "pn02", "pn02"])
