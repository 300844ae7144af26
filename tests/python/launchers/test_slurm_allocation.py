"""perseusrun's reading of a Slurm allocation (perseus.runner.hosts.slurm_allocation): the
compressed lists exactly as salloc and sbatch set them. The real allocation is exercised in
test_launchers_multihost.py::test_perseusrun_in_allocation_takes_its_hosts."""
import pytest

from perseus.runner import hosts
from perseus_test_support import perseusrun
from launchsupport import python_env


def test_expands_slurm_lists():
    assert hosts.expand_slurm_hosts("node[01-04,07]") == [
        "node01", "node02", "node03", "node04", "node07"]
    assert hosts.expand_slurm_hosts("a,b[8-10]-ib") == ["a", "b8-ib", "b9-ib", "b10-ib"]
    assert hosts.expand_slurm_hosts("r[1-2]n[1,3]") == ["r1n1", "r1n3", "r2n1", "r2n3"]
    assert hosts.expand_slurm_counts("2(x3),1") == [2, 2, 2, 1]
    for bad in ("node[01-04", "n[a-b]", "a,,b"):
        with pytest.raises(ValueError):
            hosts.expand_slurm_hosts(bad)
    with pytest.raises(ValueError):
        hosts.expand_slurm_counts("2(3)")


def test_allocation_hosts_and_slots():
    env = {"SLURM_JOB_ID": "9", "SLURM_JOB_NODELIST": "pn[01-03]",
           "SLURM_TASKS_PER_NODE": "4(x2),2"}
    assert hosts.slurm_allocation(env) == [
        hosts.HostSlots("pn01", 4), hosts.HostSlots("pn02", 4), hosts.HostSlots("pn03", 2)]
    assert hosts.slurm_allocation({"SLURM_JOB_NODELIST": "x"}) is None  # no job
    assert hosts.slurm_allocation({}) is None
    with pytest.raises(ValueError, match="lists 1 nodes"):
        hosts.slurm_allocation({"SLURM_JOB_ID": "9", "SLURM_JOB_NODELIST": "a,b",
                                "SLURM_TASKS_PER_NODE": "2"})


def test_np_still_required_outside_an_allocation():
    r = perseusrun(["true"], env=python_env(), timeout=60)
    assert r.returncode == 2 and "-np is required" in r.stderr, r.stderr
