"""Soak: 4 ranks run a bounded stream of random collectives (workers/soak.py), validating
every result, with RSS, open fds and mapped /dev/shm segments flat from after the warm-up to
the end, and nothing left in /dev/shm afterwards.

REL_SOAK_OPS sets the number of ops (default 2000, a few seconds per 1000 ops on 2 shared
cores; the issue's 20,000 is the long mode: REL_SOAK_OPS=20000)."""

import os

import pytest

import relsupport as rs

OPS = int(os.environ.get("REL_SOAK_OPS", "2000"))
pytestmark = pytest.mark.timeout(max(240, OPS // 10))
RSS_TOLERANCE = 48 << 20  # bytes per rank: allocator noise and the fusion buffer's growth


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_soak_random_collectives(tmp_path, transport):
    env = rs.job_env(PERSEUS_TIMEOUT=30)
    if transport == "tcp":
        env["PERSEUS_CPU_OPERATIONS"] = "tcp"
    ops = OPS if transport == "shm" else max(200, OPS // 4)
    seed = int(os.environ.get("REL_SEED", "12345"))
    job = rs.Job(tmp_path, "soak.py", "--ops", ops, "--seed", seed, np=4, env=env,
                 timeout=max(200, ops // 8))
    try:
        job.run()
    finally:
        rs.kill_tagged(job.tag)
    assert job.returncode == 0, job.output()
    res = job.results_by_rank()
    assert sorted(res) == [0, 1, 2, 3], job.output()
    for rank, recs in sorted(res.items()):
        final = recs[-1]
        assert final["outcome"] == "ok" and final["ops"] == ops, final
        start, end = final["start"], final["end"]
        print("  rank %d: %d ops in %.1f s; rss %.1f -> %.1f MiB, fds %d -> %d, shm maps %d -> %d"
              % (rank, ops, final["seconds"], start["rss"] / 2**20, end["rss"] / 2**20,
                 start["fds"], end["fds"], start["shm_maps"], end["shm_maps"]))
        assert end["rss"] - start["rss"] < RSS_TOLERANCE, (rank, start, end)
        assert end["fds"] <= start["fds"] + 2, (rank, start, end)
        assert end["shm_maps"] == start["shm_maps"], (rank, start, end)
    job.assert_clean()
