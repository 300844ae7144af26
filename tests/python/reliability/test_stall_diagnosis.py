"""The early stall diagnosis (PERSEUS_STALL_DIAGNOSIS) and the straggler flag
(PERSEUS_STRAGGLER_THRESHOLD) at 3 ranks: while the job runs, the rank that holds the others
up is named, with its host, within the threshold + 1 s; under torch.distributed too, where
Gloo and NCCL would only time out."""

import re

import pytest

import relsupport as rs

pytestmark = pytest.mark.timeout(120)
THRESHOLD_S = 2.0
PREFIX = re.compile(r"\[perseus (\d+) engine W\] Stall diagnosis: ")
NOTICE = re.compile(r"^(\w+) '([^']+)' (.*?) has waited ([0-9.]+) s for "
                    r"(ranks? \d+ \(host [^)]*\)(?:, \d+ \(host [^)]*\))*), which")


def diagnoses(job, name):
    """rank -> (waited seconds, the missing ranks' text, the notice's text) for tensor `name`:
    each rank's line holds one notice per stalled collective, joined by ' Also: '."""
    out = {}
    for line in job.stderr.splitlines():
        m = PREFIX.search(line)
        if not m:
            continue
        for notice in line[m.end():].split(" Also: "):
            n = NOTICE.match(notice)
            if n and n.group(2) == name and int(m.group(1)) not in out:
                out[int(m.group(1))] = (float(n.group(4)), n.group(5), notice)
    return out


def run(tmp_path, mode, **env):
    job = rs.Job(tmp_path, "stall_diagnosis.py", mode, np=3, timeout=90,
                 env=rs.job_env(PERSEUS_STALL_DIAGNOSIS=THRESHOLD_S, **env))
    job.run()
    return job


def test_a_rank_sleeping_in_python_is_named_with_its_host_and_the_waiters_call_site(tmp_path):
    job = run(tmp_path, "sleep")
    assert job.returncode == 0, job.output()
    found = diagnoses(job, "diag.metric")
    assert sorted(found) == [0, 1, 2], job.output()  # every rank logs the line
    for rank, (waited, missing, line) in found.items():
        assert re.fullmatch(r"rank 1 \(host [^)]+\)", missing), line  # perseusrun's host name
        assert THRESHOLD_S <= waited <= THRESHOLD_S + 1, line
        assert "ALLREDUCE 'diag.metric' [4] float32" in line, line
        if rank == 1:
            assert "This rank (1) is one of them" in line, line
        else:
            assert re.search(r"waits for it at \S*stall_diagnosis\.py:\d+", line), line
    # hvd.allreduce_ waits in a C function with no handle: the site finder names the line.
    found = diagnoses(job, "diag.inplace")
    assert sorted(found) == [0, 1, 2], job.output()
    line_no = worker_line("hvd.allreduce_(small, name=\"diag.inplace\")  # a C function")
    for rank, (_, _, line) in found.items():
        if rank != 1:
            assert re.search(r"its Python code is at \S*/stall_diagnosis\.py:%d in sleeper\."
                             % line_no, line), line
    assert "Straggler" not in job.stderr, job.output()
    job.assert_clean()


def test_a_rank_that_skips_a_collective_is_named_and_stall_shutdown_keeps_its_meaning(tmp_path):
    job = run(tmp_path, "skip", PERSEUS_STALL_SHUTDOWN=5)
    found = diagnoses(job, "diag.skipped")
    assert sorted(found) == [0, 1, 2], job.output()
    for rank, (waited, missing, line) in found.items():
        assert missing.startswith("rank 1 (host "), line
        assert THRESHOLD_S <= waited <= THRESHOLD_S + 1, line
        assert "[16384] float32" in line, line
    results = job.results_by_rank()
    for rank in range(3):  # then PERSEUS_STALL_SHUTDOWN fails the stalled collectives
        assert results[rank][-1]["outcome"] == "raised", job.output()
        assert "PERSEUS_STALL_SHUTDOWN=5" in results[rank][-1]["message"], job.output()
    job.assert_clean()


def test_a_rank_slowed_by_30_percent_is_flagged_once_as_a_straggler(tmp_path):
    job = run(tmp_path, "straggler")
    assert job.returncode == 0, job.output()
    flags = re.findall(r"Straggler: rank (\d+) \(host [^)]+\) arrives ([0-9.]+) ms later",
                       job.stderr)
    assert [int(r) for r, _ in flags] == [2], job.output()  # once, that rank only
    assert float(flags[0][1]) >= 5, job.output()  # ~15 ms of a ~65 ms step
    assert "Stall diagnosis" not in job.stderr, job.output()
    job.assert_clean()


def worker_line(marker):
    """The number of the worker's line that starts with `marker` (after its indent)."""
    lines = (rs.WORKERS / "stall_diagnosis.py").read_text().splitlines()
    return next(i for i, text in enumerate(lines, 1) if text.strip().startswith(marker))


def test_a_ddp_rank_that_is_late_for_all_reduce_is_named_with_the_waiters_line(tmp_path):
    """Under DDP the others wait in C++ (DDP's reducer), and for a direct dist.all_reduce in
    the core: no Handle.wait notes a site, so the line names the frame of the thread that is
    in the call, the user's loss.backward() and dist.all_reduce lines."""
    from perseus.torch.distributed import python_backends_supported
    if not python_backends_supported():
        pytest.skip("this torch cannot host a Python c10d backend (docs/torch-distributed.md)")
    job = run(tmp_path, "ddp")
    assert job.returncode == 0, job.output()
    cases = {"[68] float32": worker_line("loss.backward()"),  # DDP's bucket
             "[4] float32": worker_line("dist.all_reduce(metric)  # the others wait")}
    for shape, line_no in cases.items():
        named = {}  # the backend's own names, so each case is told by its shape
        for line in job.stderr.splitlines():
            m = PREFIX.search(line)
            n = m and NOTICE.match(line[m.end():])
            if n and n.group(1) == "ALLREDUCE" and n.group(3) == shape:
                named.setdefault(int(m.group(1)), (float(n.group(4)), n.group(5), line))
        assert sorted(named) == [0, 1, 2], (shape, job.output())
        for rank, (waited, missing, line) in named.items():
            assert re.fullmatch(r"rank 1 \(host [^)]+\)", missing), line
            assert THRESHOLD_S <= waited <= THRESHOLD_S + 1, line
            if rank != 1:
                assert re.search(r"its Python code is at \S*/stall_diagnosis\.py:%d in "
                                 r"ddp_sleeper\." % line_no, line), line
    job.assert_clean()
