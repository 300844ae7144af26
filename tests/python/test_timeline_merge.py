"""`perseus-timeline merge`: the per-rank files that start_timeline() writes at run time become
one Chrome/Perfetto trace with the ranks as processes on one clock."""
import json
import subprocess
import sys

import pytest

from perseus_test_support import job_env, run_worker

pytestmark = pytest.mark.timeout(120)


def test_run_time_timelines_of_two_ranks_merge_into_one_trace_with_ranks_as_processes(tmp_path):
    run_worker(2, "torch_timeline.py", tmp_path / "t.json", timeout=90)
    files = sorted(tmp_path.glob("t.*.json"))
    assert [f.name for f in files] == ["t.0.json", "t.1.json"]
    out = tmp_path / "merged.json"
    done = subprocess.run([sys.executable, "-m", "perseus.timeline", "merge",
                           str(tmp_path / "t.*.json"), "-o", str(out)],
                          env=job_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    events = json.loads(out.read_text())
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert names == {0: "rank 0", 1: "rank 1"}
    spans = [e for e in events if e.get("ph") == "X"]
    assert {e["pid"] for e in spans} == {0, 1}
    assert {e["name"] for e in spans} >= {"NEGOTIATE", "COMMUNICATE"}
    tracks = {e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert "tl.during" in tracks and "tl.before" not in tracks and "tl.after" not in tracks
    # One clock: the ranks ran the same three allreduces, so their spans overlap in time.
    first = {pid: min(e["ts"] for e in spans if e["pid"] == pid) for pid in (0, 1)}
    assert abs(first[0] - first[1]) < 5e6, first
