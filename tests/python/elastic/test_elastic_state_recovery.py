"""The elastic State layer under perseusrun's elastic mode (real membership epochs): the state
checks of elastic_state_torch.py with elastic_worker.reset(), and TorchState training that
loses a worker to SIGKILL and finishes on the others from their last commit, leaving no process
or shared-memory name behind. Skipped where perseusrun has no elastic mode
(perseus.runner.elastic.driver)."""

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from perseus_test_support import REPO, WORKERS, job_env, run_worker

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "reliability"))
import relsupport  # noqa: E402

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.skipif(importlib.util.find_spec("perseus.runner.elastic.driver") is None,
                       reason="perseusrun has no elastic mode in this tree"),
]


def test_state_checks_with_real_resets():
    pytest.importorskip("torch")
    result = run_worker(2, "elastic_state_torch.py", timeout=200,
                        extra=["--min-np", "2", "-H", "localhost:2"])
    assert result.stdout.count("PASS sampler") == 2, result.stdout[-3000:]


def records(results):
    out = {}
    for path in results.glob("*.json"):
        out[path.stem] = [json.loads(line) for line in path.read_text().splitlines() if line]
    return out


def test_torch_state_training_survives_a_killed_worker(tmp_path):
    pytest.importorskip("torch")
    tag = "estate-" + uuid.uuid4().hex[:10]
    results = tmp_path / tag
    results.mkdir()
    shm_before = relsupport.shm_names()
    cmd = [sys.executable, "-m", "perseus.runner", "-np", "3", "--min-np", "2", "-H",
           "localhost:3", sys.executable, str(WORKERS / "elastic_state_train.py"),
           "--results", str(results), "--epochs", "3", "--tag", tag]
    proc = subprocess.Popen(cmd, env=job_env(PERSEUS_TIMEOUT="5"), cwd=str(REPO),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 90
        victim = "localhost:1"
        while time.time() < deadline:
            steps = [r for r in records(results).get(victim, []) if r["event"] == "step"]
            if len(steps) >= 7:
                break
            assert proc.poll() is None, proc.communicate()[1][-4000:]
            time.sleep(0.05)
        else:
            raise AssertionError("the job made no progress")
        os.kill(int((results / ("pid." + victim)).read_text()), signal.SIGKILL)
        _, stderr = proc.communicate(timeout=150)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        leftover = relsupport.Job.__new__(relsupport.Job)
        leftover.tag, leftover.shm_before = tag, shm_before
        try:
            leftover.assert_clean()
        finally:
            relsupport.kill_tagged(tag)
    assert proc.returncode == 0, stderr[-6000:]
    recs = records(results)
    survivors = [w for w in recs if w != victim]
    done = {w: [r for r in recs[w] if r["event"] == "done"] for w in survivors}
    assert all(len(d) == 1 for d in done.values()), (done, stderr[-3000:])
    finals = [d[0] for d in done.values()]
    assert all(f["size"] == 2 and f["epoch"] == 3 for f in finals), finals
    assert finals[0]["weights"] == finals[1]["weights"]  # one model, bit for bit
    for w in survivors:
        events = recs[w]
        reset_at = next(i for i, r in enumerate(events) if r["event"] == "reset")
        last_commit = [r for r in events[:reset_at] if r["event"] == "commit"][-1]
        last_step = [r for r in events[:reset_at] if r["event"] == "step"][-1]
        entry = next(r for r in events[reset_at:] if r["event"] == "entry")
        # Back to the last commit (the one recorded, or one whose host check the kill cut
        # short), not to the start and not past the last step.
        assert last_commit["batch"] <= entry["batch"] <= last_step["batch"], (entry, events)
        assert entry["batch"] % 2 == 0 or entry["batch"] == last_commit["batch"], entry
