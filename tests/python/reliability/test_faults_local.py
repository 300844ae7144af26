"""Faults on one host (shared memory and, with PERSEUS_CPU_OPERATIONS=tcp, loopback TCP):
a rank SIGKILLed at random points (also among collectives posted by address, whose lender waits
for the victim's read), a rank stuck in user code. Each ends in a clear error
within bounded time, perseusrun names the rank that failed, and nothing is left behind."""

import os
import random

import pytest

import relsupport as rs

pytestmark = pytest.mark.timeout(150)
TIMEOUT_S = 10  # PERSEUS_TIMEOUT of these jobs
PHASES = ["start", "negotiation", "allreduce", "broadcast", "allgather", "posted_broadcast",
          "posted_allgather"]
SEED = int(os.environ.get("REL_SEED", random.randrange(1 << 30)))


def check_killed_job(job, victim, np, host, phase):
    """The contract of a SIGKILLed rank: perseusrun exits non-zero naming it and its host;
    every survivor that got past start-up raises a Perseus error naming the lost rank within
    PERSEUS_TIMEOUT + margin of the kill; nothing is left behind."""
    assert job.returncode != 0, job.output()
    assert "rank %d on host %s was killed by signal 9" % (victim, host) in job.stderr, \
        job.output()
    killed = job.marker("killed")
    assert killed is not None, "the victim never reached its kill point\n" + job.output()
    assert job.ended - killed < TIMEOUT_S + rs.TIMEOUT_MARGIN_S, job.output()
    results = job.results_by_rank()
    messages = {}
    for rank in range(np):
        if rank == victim:
            continue
        records = results.get(rank, [])
        raised = [r for r in records if r["outcome"] == "raised"]
        if phase == "start" and not raised:
            continue  # still in rendezvous when perseusrun stopped the job: nothing to raise
        assert raised, "rank %d never raised after rank %d was killed (phase %s)\n%s" % (
            rank, victim, phase, job.output())
        r = raised[0]
        assert "PerseusInternalError" in r["classes"], r
        assert r["time"] - killed < TIMEOUT_S + rs.TIMEOUT_MARGIN_S, r
        messages[rank] = "%s after %.2f s: %s" % (r["type"], r["time"] - killed, r["message"])
    for rank, m in sorted(messages.items()):
        print("  rank %d: %s" % (rank, m))
    # The first rank to notice names the victim. Others may name that rank instead, once it
    # has left after raising (see docs/RELIABILITY.md, "cascade").
    if messages:
        assert any(("rank %d" % victim) in m for m in messages.values()), messages
    job.assert_clean()


@pytest.mark.parametrize("transport", ["shm", "tcp"])
@pytest.mark.parametrize("phase", PHASES)
def test_sigkill_one_rank(tmp_path, phase, transport):
    rnd = random.Random(SEED + PHASES.index(phase))
    victim = rnd.randrange(3)
    env = rs.job_env(PERSEUS_TIMEOUT=TIMEOUT_S)
    if transport == "tcp":
        env["PERSEUS_CPU_OPERATIONS"] = "tcp"
    job = rs.Job(tmp_path, "faults.py", "--mode", "kill", "--phase", phase, "--victim", victim,
                 "--seed", rnd.randrange(1 << 30), "--elements", 1 << 20, np=3, env=env)
    try:
        job.run()
        check_killed_job(job, victim, 3, "localhost", phase)
    finally:
        rs.kill_tagged(job.tag)
    print("seed %d phase %s victim %d: perseusrun ended %.2f s after the kill" % (
        SEED, phase, victim, job.ended - job.marker("killed")))


def test_stall_warning_names_rank_and_tensor(tmp_path):
    env = rs.job_env(PERSEUS_STALL_WARNING=1)
    job = rs.Job(tmp_path, "faults.py", "--mode", "stall", "--victim", 2, "--stall-s", 5,
                 np=3, env=env)
    job.run()
    assert job.returncode == 0, job.output()  # the stuck rank comes back: the job goes on
    lines = [l for l in job.stderr.splitlines() if "grad.stuck" in l]
    assert lines, "no stall warning names grad.stuck\n" + job.output()
    print("  stall warning: %s" % lines[0])
    assert any("2" in l.split("grad.stuck", 1)[1] or "rank 2" in l or "ranks 2" in l
               or "[2]" in l for l in lines), lines
    job.assert_clean()


def test_stall_shutdown_ends_the_job(tmp_path):
    env = rs.job_env(PERSEUS_STALL_WARNING=1, PERSEUS_STALL_SHUTDOWN=3)
    job = rs.Job(tmp_path, "faults.py", "--mode", "stall", "--victim", 2, "--stall-s", 60,
                 np=3, env=env)
    try:
        job.run()
    finally:
        rs.kill_tagged(job.tag)
    assert job.returncode != 0, job.output()
    stuck = job.marker("stuck")
    assert job.ended - stuck < 3 + TIMEOUT_S + rs.TIMEOUT_MARGIN_S, job.output()
    results = job.results_by_rank()
    for rank in (0, 1):
        raised = [r for r in results.get(rank, []) if r["outcome"] == "raised"]
        assert raised, "rank %d did not raise\n%s" % (rank, job.output())
        print("  rank %d: %s after %.2f s: %s" % (rank, raised[0]["type"],
                                                 raised[0]["time"] - stuck, raised[0]["message"]))
        assert "grad.stuck" in raised[0]["message"] or "stall" in raised[0]["message"].lower(), \
            raised[0]
    job.assert_clean()
