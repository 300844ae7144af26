"""dist.shrink_group on the perseus backend (Note [Shrinking] in _shrink.py), 3 ranks started by
hand (tcp://: torch's store lives in rank 0, which stays): DDP training in which rank 2 dies,
the survivors shrink the group and go on from their last in-memory commit
(examples/elastic_ddp.py); and a rank that stays alive but is left out, by hand and under
perseusrun."""
import json
import re

import pytest

from consumer_support import EXAMPLES
from distsupport import PY, free_port, perseusrun, processes, spawn_ranks

pytest.importorskip("torch")
pytestmark = pytest.mark.timeout(150)

STEPS, COMMIT_EVERY, KILL_AT = 8, 3, 5


def _shrink_supported():
    import torch.distributed as dist
    from perseus.torch.distributed import python_backends_supported
    return hasattr(dist, "shrink_group") and python_backends_supported()


def _cuda_devices(n):
    import torch
    return torch.cuda.is_available() and torch.cuda.device_count() >= n


@pytest.fixture(autouse=True)
def _needs_shrink_group():
    if not _shrink_supported():
        pytest.skip("this torch has no shrink_group, or cannot build a Python c10d Backend")


def _example(np, *args, timeout=90):
    return spawn_ranks(np, [PY, str(EXAMPLES / "elastic_ddp.py")] + [str(a) for a in args],
                       timeout=timeout, OMP_NUM_THREADS="1")


def test_ddp_survivors_shrink_and_continue_from_the_last_commit():
    codes, out = _example(3, "--steps", STEPS, "--commit-every", COMMIT_EVERY,
                          "--kill-rank", 2, "--kill-at", KILL_AT, "--settle", 1)
    assert codes == [0, 0, 1], "exit codes %s\n%s" % (codes, out[-8000:])
    recs = [json.loads(l[l.find('{"event"'):]) for l in out.splitlines() if '{"event"' in l]
    done = [r for r in recs if r["event"] == "done"]
    assert sorted(r["rank"] for r in done) == [0, 1] and all(r["world"] == 2 for r in done)
    assert all(r["step"] == STEPS for r in done), done
    assert done[0]["weights"] == done[1]["weights"]
    assert all(r["total"] == 3.0 for r in done)  # 1 + 2: an all_reduce on the shrunk group
    rebuilt = [r for r in recs if r["event"] == "rebuilt"]
    assert sorted(r["rank"] for r in rebuilt) == [0, 1], out[-8000:]
    assert all(r["step"] == COMMIT_EVERY for r in rebuilt)  # the last commit before the loss
    # The survivors learnt of the loss from their pending collective, naming the lost rank.
    assert re.search(r"rank 2 .*exited", out), out[-8000:]
    first = {(r["world"], r["step"]): r["loss"] for r in recs
             if r["event"] == "step" and r["rank"] == 0}
    assert first[(2, COMMIT_EVERY + 1)] == first[(3, COMMIT_EVERY + 1)]


@pytest.mark.parametrize("launch", ["tcp", "perseusrun"])
def test_a_live_rank_left_out(launch):
    """Through torch's store (tcp://), and through perseusrun's store (its own prefix)."""
    if launch == "tcp":
        r, out = processes(3, "shrink_excluded@tcp://127.0.0.1:%d" % free_port(), timeout=60)
    else:
        r, out = perseusrun(3, "shrink_excluded", timeout=60)
    assert r.returncode == 0, out[-6000:]
    assert out.count("SHRINK OK") == 2, out[-6000:]


@pytest.mark.skipif(not _cuda_devices(3), reason="needs 3 CUDA devices")
def test_a_live_rank_left_out_on_cuda():
    r, out = perseusrun(3, "shrink_excluded_cuda", timeout=120)
    assert r.returncode == 0, out[-6000:]
    assert out.count("SHRINK OK on cuda") == 2, out[-6000:]
