"""The chaos soak's CI tier: bench/chaos/soak.py with about 30 faults (random kills, exits aimed
at each fragile phase through perseus.common.fault_injection, stops, grows and shrinks) on a
4-rank elastic TorchState job, short timeouts, the whole soak within CHAOS_MINUTES (its
--minutes: it stops injecting in time to finish the job and its checks). Every fault
must be recovered from with nothing lost: no hang, no divergent replica, no commit lost, every
job finishing with exit 0 and leaving no process or shared-memory segment.

The seed is printed; CHAOS_SEED=<seed> replays the same faults, CHAOS_FAULTS resizes the run.
The full soak and its committed figures: bench/results/chaos_soak.md."""

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "reliability"))
import relsupport  # noqa: E402

SOAK = relsupport.REPO / "bench" / "chaos" / "soak.py"
FAULTS = int(os.environ.get("CHAOS_FAULTS", "30"))
SEED = int(os.environ.get("CHAOS_SEED") or random.SystemRandom().randrange(1 << 31))
MINUTES = float(os.environ.get("CHAOS_MINUTES", "3.5"))
# At least this share of FAULTS must fit in MINUTES on a loaded machine (a grow waits for the
# new worker to start, which takes seconds under load).
MIN_SHARE = 1 / 3

pytestmark = pytest.mark.timeout(MINUTES * 60 + 60)


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def test_chaos_soak_ci_tier(tmp_path):
    print("chaos CI tier: CHAOS_SEED=%d CHAOS_FAULTS=%d" % (SEED, FAULTS))
    out = tmp_path / "chaos"
    cmd = [relsupport.PY, str(SOAK), "--faults", str(FAULTS), "--faults-per-job", str(FAULTS),
           "--seed", str(SEED), "--out", str(out), "--timeout", "2", "--start-timeout", "20",
           "--hang-s", "30", "--gap", "0.1", "0.5", "--minutes", str(MINUTES)]
    proc = subprocess.run(cmd, env=relsupport.job_env(), capture_output=True, text=True,
                          timeout=MINUTES * 60 + 40)
    context = "seed %d\n%s\n%s" % (SEED, proc.stdout[-6000:], proc.stderr[-3000:])
    assert proc.returncode == 0, context
    faults = [f for f in read_jsonl(out / "faults.jsonl") if f.get("problem") != "not fired"]
    jobs = read_jsonl(out / "jobs.jsonl")
    assert len(faults) >= MIN_SHARE * FAULTS, context
    problems = [f for f in faults if f.get("problem") or "resume_s" not in f]
    assert not problems, "faults not recovered from: %s\n%s" % (problems, context)
    for job in jobs:
        assert job["problem"] is None and job["exit"] == 0, (job, context)
        assert job["divergent_count"] == 0, (job["divergent"], context)
        assert job["lost_commit_count"] == 0, (job["lost_commits"], context)
        assert not job["leftover_pids"] and not job["leftover_shm"], (job, context)
    assert {f["kind"] for f in faults} & {"kill", "exit@commit", "exit@negotiation",
                                         "exit@allreduce"}, context
