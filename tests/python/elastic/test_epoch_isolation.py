"""Note [Epoch isolation] with real processes sharing one store: ranks under the same
PERSEUS_STORE_PREFIX form a job; a rank under another epoch's prefix never meets them (each
side times out naming the rank it waited for); and the workers' StoreClient sees the
launcher's keys."""

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "reliability"))
import relsupport  # noqa: E402

pytestmark = pytest.mark.timeout(120)

RANK_SCRIPT = """
import numpy as np
from perseus.common import basics
basics.init()
x = np.ones(4, dtype=np.float32)
basics.core().allreduce("x", x, None, op=0, blocking=True)
print("sum", int(x[0]), flush=True)
basics.shutdown()
"""


@pytest.fixture
def store():
    from perseus import _core
    secret = secrets.token_hex(32)
    server = _core.StoreServer("127.0.0.1", 0, secret)
    yield server, secret
    server.stop()


def _start(server, secret, rank, prefix, job_id):
    env = relsupport.job_env(PERSEUS_START_TIMEOUT="4")
    env.update({"PERSEUS_RANK": str(rank), "PERSEUS_SIZE": "2", "PERSEUS_LOCAL_RANK": str(rank),
                "PERSEUS_LOCAL_SIZE": "2", "PERSEUS_CROSS_RANK": "0", "PERSEUS_CROSS_SIZE": "1",
                "PERSEUS_HOSTNAME": "localhost", "PERSEUS_CONTROLLER_ADDR": "127.0.0.1",
                "PERSEUS_CONTROLLER_PORT": str(server.port), "PERSEUS_SECRET": secret,
                "PERSEUS_STORE_PREFIX": prefix, "PERSEUS_JOB_ID": job_id})
    return subprocess.Popen([relsupport.PY, "-c", RANK_SCRIPT], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _results(procs):
    return [p.communicate(timeout=60) + (p.returncode,) for p in procs]


def test_ranks_of_one_epoch_meet(store):
    server, secret = store
    before = relsupport.shm_names()
    job = "iso" + secrets.token_hex(4)
    out = _results([_start(server, secret, r, "elastic/1/", job + "-e1") for r in (0, 1)])
    for stdout, stderr, code in out:
        assert code == 0 and "sum 2" in stdout, stderr
    assert not relsupport.leaked_shm(before)


def test_a_rank_of_another_epoch_never_joins(store):
    server, secret = store
    before = relsupport.shm_names()
    job = "iso" + secrets.token_hex(4)
    # Epoch 1 is complete in the store first, as an old membership would be.
    first = _results([_start(server, secret, r, "elastic/1/", job + "-e1") for r in (0, 1)])
    assert all(code == 0 for _, _, code in first)
    # Rank 0 of epoch 2 and a rank 1 left over from epoch 1: neither sees the other.
    out = _results([_start(server, secret, 0, "elastic/2/", job + "-e2"),
                    _start(server, secret, 1, "elastic/1/", job + "-e1")])
    new_rank, old_rank = out
    assert new_rank[2] != 0 and "ranks 1 did not reach the rendezvous store" in new_rank[1], \
        new_rank[1]
    # The old rank finds its epoch's rank 1 already claimed: it is refused outright.
    assert old_rank[2] != 0 and "already joined this job as rank 1" in old_rank[1], old_rank[1]
    assert not relsupport.leaked_shm(before)


def test_store_client_round_trip(store):
    from perseus import _core
    server, secret = store
    c = _core.StoreClient("127.0.0.1", server.port, secret, 5.0)
    assert c.get("missing") is None
    c.set("k", b"v\x00w")
    assert c.get("k") == b"v\x00w" and c.get("k", 1.0) == b"v\x00w"
    assert c.add("n", 2) == 2 and c.add("n", 0) == 2
    with pytest.raises(Exception, match="did not appear"):
        c.get("never", 0.2)
    c.close()
    with pytest.raises(Exception):
        _core.StoreClient("127.0.0.1", server.port, "00" * 32, 2.0)
