"""Helpers of the launcher tests: the worker's result lines, and the topology perseusrun gives
the same placement (perseus.runner.hosts.assign_slots), which every launcher must match."""
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "multihost"))
sys.path.insert(0, str(HERE.parent))
from perseus_test_support import require  # noqa: E402  (re-exported for the launcher tests)
WORKER = str(HERE / "topology_worker.py")
SIX = ("rank", "size", "local_rank", "local_size", "cross_rank", "cross_size")
# Intel MPI's runtime from PyPI (impi-rt), installed by scripts/setup.sh under a prefix of its
# own so that Open MPI's mpirun/mpiexec stay the ones on PATH; called by its full path.
IMPI_PREFIX = os.environ.get("PERSEUS_IMPI_PREFIX", "/opt/impi")
MPIEXEC_IMPI = os.path.join(IMPI_PREFIX, "bin", "mpiexec.hydra")
MPIRUN_IMPI = os.path.join(IMPI_PREFIX, "bin", "mpirun")
# The secret torchrun and srun jobs need (Note [Launchers]); a test value, not a real one.
TEST_SECRET = "perseus-test-secret-0123456789"


def results(text):
    """rank -> the worker's result record, from the launcher's combined output."""
    out = {}
    marker = "PERSEUS_RESULT "
    # Ranks that share a pipe may land on one line: every marker starts a record.
    at = text.find(marker)
    while at >= 0:
        rec = json.JSONDecoder().raw_decode(text[at + len(marker):])[0]
        out[rec["rank"]] = rec
        at = text.find(marker, at + len(marker))
    return out


def perseusrun_topology(slots_per_host):
    """rank -> the six values perseusrun assigns for `slots_per_host` ranks on each host."""
    from perseus.runner import hosts
    host_list = [hosts.HostSlots("host%d" % i, n) for i, n in enumerate(slots_per_host)]
    slots = hosts.assign_slots(host_list, sum(slots_per_host))
    return {s.rank: {k: getattr(s, k) for k in SIX} for s in slots}


def check_job(output, slots_per_host, hosts=None):
    """Every rank reported, with perseusrun's topology, the right allreduce result (the
    average of 1..size) and, if given, on the expected host. Returns the records."""
    res = results(output)
    expected = perseusrun_topology(slots_per_host)
    size = len(expected)
    assert sorted(res) == list(range(size)), "ranks missing:\n" + output[-6000:]
    mean = (size + 1) / 2.0
    for rank, rec in res.items():
        assert {k: rec[k] for k in SIX} == expected[rank], (rank, rec, expected[rank])
        assert rec["value"] == [mean] * 4, rec
        if hosts is not None:
            assert rec["host"] == hosts[rank], (rank, rec["host"], hosts)
    return res


def python_env(**extra):
    """The environment for processes that a launcher starts (they find this perseus)."""
    from perseus_test_support import job_env
    env = job_env(PYTHONUNBUFFERED="1")
    for k in [k for k in env if k.startswith(("PERSEUS_RANK", "PERSEUS_SIZE", "PERSEUS_SECRET",
                                              "OMPI_", "PMI_", "PMIX_", "SLURM_", "MASTER_",
                                              "TORCHELASTIC", "PET_"))]:
        del env[k]
    env.update(extra)
    return env


def require_intel_mpi():
    require(os.access(MPIEXEC_IMPI, os.X_OK),
            "Intel MPI's mpiexec.hydra at %s (pip's impi-rt; PERSEUS_IMPI_PREFIX names another "
            "prefix)" % MPIEXEC_IMPI)
