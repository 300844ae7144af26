"""Elastic DDP on the perseus backend (examples/elastic_ddp.py): under perseusrun's elastic
mode one of 3 ranks exits mid-training; the 2 survivors, in the same processes, restore the
last in-memory commit, rebuild the process group, re-wrap the model in DDP and finish."""
import json

import pytest

from consumer_support import EXAMPLES, perseusrun_elastic

pytest.importorskip("torch")
pytestmark = pytest.mark.timeout(200)

STEPS, COMMIT_EVERY, KILL_AT = 10, 4, 6


def records(stdout):
    out = []
    for line in stdout.splitlines():
        start = line.find('{"event"')
        if start >= 0:
            out.append(json.loads(line[start:]))
    return out


def test_ddp_survivors_continue_from_the_last_commit():
    result = perseusrun_elastic(
        ["-np", "3", "--min-np", "2", "--elastic-timeout", "5", "-H", "localhost:3"],
        EXAMPLES / "elastic_ddp.py", "--steps", STEPS, "--commit-every", COMMIT_EVERY,
        "--kill-rank", "1", "--kill-at", KILL_AT, "--start-np", "3")
    recs = records(result.stdout)
    done = [r for r in recs if r["event"] == "done"]
    assert sorted(r["rank"] for r in done) == [0, 1] and all(r["world"] == 2 for r in done)
    assert all(r["step"] == STEPS for r in done)
    assert done[0]["weights"] == done[1]["weights"]
    rebuilt = [r for r in recs if r["event"] == "rebuilt"]
    assert sorted(r["rank"] for r in rebuilt) == [0, 1]
    assert all(r["step"] == COMMIT_EVERY for r in rebuilt)  # the last commit before the loss
    # Rank 0 stays rank 0: its first step after the restore repeats, from the committed
    # weights and on the same batch, the step it took at 3 ranks.
    first = {(r["world"], r["step"]): r["loss"] for r in recs
             if r["event"] == "step" and r["rank"] == 0}
    assert first[(2, COMMIT_EVERY + 1)] == first[(3, COMMIT_EVERY + 1)]


def test_backend_failures_count_as_perseus_errors_for_the_run_loop():
    from perseus.common.exceptions import PerseusInternalError
    from perseus.torch.elastic.errors import perseus_error
    text = ("Got the following error when running the callback: DistBackendError: perseus: "
            "allreduce on process group '0' failed on rank 0 (group rank 0 of 2): rank 1 exited")
    assert isinstance(perseus_error(RuntimeError(text)), PerseusInternalError)
    other = RuntimeError("CUDA out of memory")
    assert perseus_error(other) is other
    try:
        try:
            raise PerseusInternalError("lost")
        except PerseusInternalError as e:
            raise RuntimeError("wrapped") from e
    except RuntimeError as wrapped:
        assert isinstance(perseus_error(wrapped), PerseusInternalError)
