"""Bad input on every rank (perseus.torch, and perseus.mxnet where MXNet imports): a clear
error within a bounded time, and the job keeps working after it."""

import pytest

import relsupport as rs
from perseus_test_support import require_mxnet

pytestmark = pytest.mark.timeout(180)


def _run(tmp_path, worker, *args):
    job = rs.Job(tmp_path, worker, *args, np=2, env=rs.job_env(PERSEUS_TIMEOUT=10), timeout=170)
    try:
        job.run()
    finally:
        rs.kill_tagged(job.tag)
    for rank, recs in sorted(job.results_by_rank().items()):
        for r in recs:
            if rank == 0 and "case" in r:
                print("  %-45s %-16s %-22s %.3fs %s" % (
                    r["case"], r["outcome"], r.get("type", ""), r.get("seconds", 0),
                    r.get("message", "")[:90].replace("\n", " ")))
    assert job.returncode == 0, job.output()
    assert job.stdout.count("PASS bad_input") == 2, job.output()
    job.assert_clean()


def test_torch_bad_input(tmp_path):
    pytest.importorskip("torch")
    _run(tmp_path, "torch_bad_input.py")


def test_mxnet_bad_input(tmp_path):
    require_mxnet()
    _run(tmp_path, "mx_bad_input.py")


def test_torch_same_name_on_different_process_sets(tmp_path):
    pytest.importorskip("torch")
    _run(tmp_path, "torch_bad_input.py", "--psmix")
