"""bench/sync_bn_accuracy.py, the command behind docs/sync_bn.md, end to end in its smoke form:
every configuration under perseusrun -np 4 (two simulated hosts for comm_scope 0), two tiny
epochs, then the plot and the table from the records."""

import json
import os
import subprocess
import sys

import pytest

from perseus_test_support import REPO, job_env

DATA = "/usr/share/datasets/fashion-mnist"
pytestmark = [pytest.mark.timeout(400),
              pytest.mark.skipif(not os.path.isdir(DATA), reason="needs dataset-fashion-mnist")]


def _smoke(tmp_path, framework):
    out = tmp_path / framework
    cmd = [sys.executable, str(REPO / "bench" / "sync_bn_accuracy.py"), "--smoke",
           "--framework", framework, "--train-samples", "160", "--test-samples", "200",
           "--out-dir", str(out), "--plot", str(out / "plot.png"), "--doc", str(out / "doc.md")]
    result = subprocess.run(cmd, env=job_env(), capture_output=True, text=True, timeout=360)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    return out, result.stdout


def _records(out):
    rows = []
    for name in sorted(os.listdir(out)):
        if name.endswith(".jsonl"):
            rows += [json.loads(line) for line in open(out / name)]
    return rows


def test_mxnet_every_configuration(tmp_path):
    out, log = _smoke(tmp_path, "mxnet")
    rows = _records(out)
    seen = {(r["bn"], r["comm_scope"], r["local_size"]) for r in rows}
    # plain on one host and on two; sync over each host's 2 ranks; sync over all 4
    assert seen == {("plain", None, 4), ("plain", None, 2), ("sync", 0, 2), ("sync", 1, 4)}
    assert all(r["epoch"] in (1, 2) and r["ranks"] == 4 and 0 <= r["test_accuracy"] <= 1
               for r in rows)
    assert (out / "plot.png").stat().st_size > 10000
    table = (out / "doc.md").read_text()
    assert "<!-- BEGIN sync-bn-accuracy -->" in table and "comm_scope=0 (per host)" in table


def test_torch_plain_and_sync(tmp_path):
    out, _ = _smoke(tmp_path, "torch")
    assert {(r["bn"], r["local_size"]) for r in _records(out)} == {("plain", 4), ("sync", 4)}
    assert (out / "plot.png").exists()
