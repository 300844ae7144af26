"""New workers joining a running elastic job, in the cases where Horovod's hang or die:
  - horovod#2652: a host added while the others are broadcasting a large state; the new
    worker must join (receive the state by broadcast) and the job go on at the new size;
  - horovod#3264 seen from a new worker: a member of the membership the new worker was placed
    in is lost while the new worker is in its first rendezvous; it must join the next
    membership instead of exiting.
Real processes under perseusrun's elastic mode, each job bounded in time, then the reliability
suite's leak check."""

import json
import re
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "reliability"))
import relsupport  # noqa: E402
from test_elastic_local import elastic_job, final  # noqa: E402,F401  (elastic_job: a fixture)
from test_elastic_random import write_hosts  # noqa: E402

pytestmark = pytest.mark.timeout(240)

BCAST_WORKER = HERE / "workers" / "elastic_bcast.py"
MAX_BCAST_NP = 7


@pytest.mark.parametrize("plane", ["shm", "tcp"])
def test_horovod_2652_a_host_added_during_a_large_broadcast_joins(elastic_job, tmp_path, plane):
    """Growth one slot at a time from 2 workers, each announced while the members broadcast
    32 MiB back to back, until an announcement has landed inside a broadcast (the workers read
    the newest epoch before and after each one; broadcasts fill most of the time, so the first
    growth nearly always does) and the job has grown twice at least. Every new worker
    receives the state by broadcast and checks it; the job goes on at each new size and every
    member ends at the final size with the same step."""
    hosts = tmp_path / "hosts.txt"
    write_hosts(hosts, 2)
    finish = tmp_path / "finish"
    tcp = ["--tcp"] if plane == "tcp" else []
    job = elastic_job(["-np", "2", "--min-np", "2", "--max-np", str(MAX_BCAST_NP),
                       "--host-discovery-script", "cat %s" % hosts] + tcp,
                      steps=100000, step_sleep=0, worker=BCAST_WORKER, timeout=200,
                      worker_args=["--mib", "32", "--finish-file", finish]).start()
    size = 2
    while size < 4 or not announced_during(job.records()):
        assert size < MAX_BCAST_NP, (
            "no membership was announced while a broadcast was in flight\n" + job.output())
        job.wait_steps(size, 3)
        start = max(r["step"] for recs in job.records().values() for r in recs
                    if r["event"] == "step")
        size += 1
        write_hosts(hosts, size)
        wait_joined(job, "localhost:%d" % (size - 1), size)
        job.wait_steps(size, start + 3)  # on at the new size, after the newcomer's sync
    finish.write_text("1")
    code = job.wait().returncode
    assert code == 0, job.output()
    records = job.records()
    for w in ("localhost:%d" % i for i in range(2, size)):
        joined = [r for r in records[w] if r["event"] == "joined"]
        assert joined[0]["step"] > 0 and joined[0]["state_ok"], (w, joined)
    assert all(r.get("state_ok", True) for recs in records.values() for r in recs)
    done = final(records)
    ends = {(d[0]["size"], d[0]["step"]) for d in done.values() if d}
    assert sorted(w for w, d in done.items() if d) == ["localhost:%d" % i for i in range(size)]
    assert len(ends) == 1 and next(iter(ends))[0] == size, ends


def announced_during(records):
    return [r for recs in records.values() for r in recs if r.get("announced_during")]


def wait_joined(job, wid, size, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        joined = [r for r in job.records().get(wid, ()) if r["event"] == "joined"]
        if joined:
            assert joined[0]["size"] == size, joined
            return
        assert job.proc.poll() is None, "perseusrun ended early\n" + job.output()
        time.sleep(0.1)
    raise AssertionError("%s did not join within %d s (a hang)" % (wid, timeout))




def test_horovod_3264_a_new_worker_whose_first_membership_loses_a_member_joins_the_next(
        elastic_job, tmp_path):
    """localhost:3 is added; localhost:1 exits once localhost:3 is in the rendezvous of the
    membership that adds it (and waits for localhost:1). The launcher gives that membership up
    and publishes the next without localhost:1: the new worker's first init() fails and it
    joins the next membership, as the survivors do, instead of exiting."""
    hosts = tmp_path / "hosts.txt"
    write_hosts(hosts, 3)
    job = elastic_job(["-np", "3", "--min-np", "2", "--host-discovery-script",
                       "cat %s" % hosts], steps=80,
                      worker_args=["--exit-on-update", "localhost:1:localhost:3"]).start()
    job.wait_steps(3, 10)
    write_hosts(hosts, 4)
    code = job.wait().returncode
    assert code == 0, job.output()
    assert "epoch 2: 4 workers (localhost:0, localhost:1, localhost:2, localhost:3)" \
        in job.stderr, job.output()
    assert "epoch 3: 3 workers (localhost:0, localhost:2, localhost:3)" in job.stderr, \
        job.output()
    assert "worker localhost:3 (" not in job.stderr, job.output()  # it never failed
    done = final(job.records())
    for w in ("localhost:0", "localhost:2", "localhost:3"):
        assert done[w] and done[w][0]["size"] == 3 and done[w][0]["step"] == 80, (w, done)
        assert done[w][0]["epoch"] == 3, (w, done)
    assert not done["localhost:1"]


def test_members_train_on_while_a_new_worker_starts(elastic_job, tmp_path):
    """Note [Newcomers start before they are published] (runner/elastic/driver.py): a slot
    added through discovery whose worker takes 6 s to start. The driver publishes the
    membership with it only once it waits for one, so the members keep training (in epoch 1)
    while it starts, instead of waiting for it in the next membership's rendezvous."""
    hosts = tmp_path / "hosts.txt"
    write_hosts(hosts, 2)
    job = elastic_job(["-np", "2", "--min-np", "2", "--max-np", "3",
                       "--host-discovery-script", "cat %s" % hosts], steps=150,
                      step_sleep=0.05, worker_args=["--start-delay", "localhost:2:6"]).start()
    job.wait_steps(2, 5)
    write_hosts(hosts, 3)
    listed = time.time()
    code = job.wait().returncode
    assert code == 0, job.output()
    records = job.records()
    late = [r for r in records["localhost:0"]
            if r["event"] == "step" and r["epoch"] == 1 and r["time"] > listed + 5]
    assert late, "the members stopped training while the new worker started\n" + job.output()
    done = final(records)
    for w in ("localhost:0", "localhost:1", "localhost:2"):
        assert done[w] and done[w][0]["size"] == 3 and done[w][0]["step"] == 150, (w, done)


def test_a_new_worker_unlisted_while_it_starts_is_stopped_unpublished(elastic_job, tmp_path):
    """Note [Newcomers start before they are published]: a slot added and removed again by
    discovery while its worker is still starting. The worker is stopped and never enters a
    membership; the members never reset."""
    hosts = tmp_path / "hosts.txt"
    write_hosts(hosts, 2)
    job = elastic_job(["-np", "2", "--min-np", "2", "--max-np", "3",
                       "--host-discovery-script", "cat %s" % hosts], steps=150,
                      step_sleep=0.05, worker_args=["--start-delay", "localhost:2:8"]).start()
    job.wait_steps(2, 5)
    write_hosts(hosts, 3)
    time.sleep(3)  # discovery runs every second: the worker has started and sleeps
    write_hosts(hosts, 2)
    code = job.wait().returncode
    assert code == 0, job.output()
    assert "host slot localhost:2 is no longer listed" in job.stderr, job.output()
    assert "epoch 2" not in job.stderr, job.output()
    done = final(job.records())
    for w in ("localhost:0", "localhost:1"):
        assert done[w] and done[w][0]["size"] == 2 and done[w][0]["step"] == 150, (w, done)


def test_a_spare_worker_takes_over_the_slot_that_discovery_adds(elastic_job, tmp_path):
    """Note [Spare workers] (runner/elastic/spares.py): with --spare-workers 1 perseusrun keeps
    one process started ahead of need, and says when it has warmed up. The slot that discovery
    adds is given to it (the new worker is that process, and perseusrun says whether it had
    warmed up), it joins and trains at the new size; the spare started after it ends with the
    job, leaving nothing behind."""
    hosts = tmp_path / "hosts.txt"
    write_hosts(hosts, 2)
    job = elastic_job(["-np", "2", "--min-np", "2", "--max-np", "4", "--spare-workers", "1",
                       "--verbose", "--host-discovery-script", "cat %s" % hosts],
                      steps=150, step_sleep=0.1).start()
    job.wait_steps(2, 5)
    write_hosts(hosts, 3)
    code = job.wait().returncode
    assert code == 0, job.output()
    took = re.search(r"started worker localhost:2 from spare spare1 \(output prefix \[\d+\], "
                     r"pid (\d+)\)", job.stderr)
    assert took and int(took.group(1)) == job.pid("localhost:2"), job.output()
    assert "started spare worker spare2 on localhost" in job.stderr, job.output()
    warm = "spare worker spare1 is ready" in job.stderr
    assert took.group(0) + (", warmed up" if warm else ", still warming up") in job.stderr, \
        job.output()
    done = final(job.records())
    for w in ("localhost:0", "localhost:1", "localhost:2"):
        assert done[w] and done[w][0]["size"] == 3 and done[w][0]["step"] == 150, (w, done)


NEWCOMER_SCRIPT = """
import json, sys
import perseus.torch  # registers torch's warm-up
from perseus.common.elastic import worker as elastic_worker
from perseus.rendezvous import elastic as keys
store = elastic_worker._store()
seen = {}
def look():  # registered last: runs after torch's warm-up, still before "ready"
    seen.update(dynamo="torch._dynamo" in sys.modules,
                ready=store.get(keys.ready("localhost:2")))
elastic_worker.before_ready(look)
store.set(keys.assignment(3, "localhost:2"), b"rank=2 size=3 local_rank=2 local_size=3 "
          b"cross_rank=0 cross_size=1 host=localhost")
store.set(keys.EPOCH, b"3")
elastic_worker.prepare_init()
print(json.dumps(dict(seen, ready_after=store.get(keys.ready("localhost:2")).decode(),
                      epoch=elastic_worker.epoch())))
"""


@pytest.mark.parametrize("first_epoch", [1, 3])
def test_a_new_worker_does_torchs_one_time_imports_before_it_says_it_is_ready(first_epoch):
    """Note [A new worker warms up before it is ready] (common/elastic_worker.py): a worker
    started for a new slot of a running job imports torch._dynamo (what torch's first optimizer
    imports, seconds of work) before the launcher publishes it, so the members do not wait for
    it in the state sync; the job's first workers (first epoch 1) do not."""
    from perseus import _core
    secret = secrets.token_hex(32)
    server = _core.StoreServer("127.0.0.1", 0, secret)
    try:
        env = relsupport.job_env(
            PERSEUS_ELASTIC="1", PERSEUS_ELASTIC_WORKER_ID="localhost:2",
            PERSEUS_ELASTIC_FIRST_EPOCH=first_epoch, PERSEUS_ELASTIC_JOB_ID="warm",
            PERSEUS_CONTROLLER_ADDR="127.0.0.1", PERSEUS_CONTROLLER_PORT=server.port,
            PERSEUS_SECRET=secret)
        proc = subprocess.run([relsupport.PY, "-c", NEWCOMER_SCRIPT], env=env,
                              capture_output=True, text=True, timeout=120)
    finally:
        server.stop()
    assert proc.returncode == 0, proc.stderr[-4000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["ready_after"] == "1" and seen["epoch"] == 3, seen
    if first_epoch == 1:
        assert seen == {"ready_after": "1", "epoch": 3}, seen  # no warm-up ran
    else:
        assert seen["dynamo"] and seen["ready"] is None, seen


def test_a_new_worker_does_not_wait_for_a_slow_one_started_with_it(elastic_job, tmp_path):
    """Note [Newcomers start before they are published]: two slots listed at once, one of
    whose workers takes 10 s longer to start. Newcomers started together are published
    together, but one that is ready waits at most JOIN_TOGETHER_S for the other: localhost:2
    joins in epoch 2 and localhost:3 in epoch 3 once it is ready."""
    hosts = tmp_path / "hosts.txt"
    write_hosts(hosts, 2)
    job = elastic_job(["-np", "2", "--min-np", "2", "--max-np", "4",
                       "--host-discovery-script", "cat %s" % hosts], steps=400,
                      step_sleep=0.05, worker_args=["--start-delay", "localhost:3:10"]).start()
    job.wait_steps(2, 5)
    write_hosts(hosts, 4)
    code = job.wait().returncode
    assert code == 0, job.output()
    assert "epoch 2: 3 workers (localhost:0, localhost:1, localhost:2)" in job.stderr, \
        job.output()
    assert "epoch 3: 4 workers (localhost:0, localhost:1, localhost:2, localhost:3)" \
        in job.stderr, job.output()
    done = final(job.records())
    for w in ("localhost:0", "localhost:1", "localhost:2", "localhost:3"):
        assert done[w] and done[w][0]["size"] == 4 and done[w][0]["step"] == 400, (w, done)


def test_a_member_stopped_while_the_members_meet_a_new_worker_is_removed(elastic_job,
                                                                         tmp_path):
    """A member stops (SIGSTOP) right after the announcement of a new worker, while the others
    meet it in the next membership's rendezvous, which waits up to PERSEUS_START_TIMEOUT (no
    collective there times out on it). perseusrun sees the process stopped and, after
    PERSEUS_TIMEOUT, removes it: the others go on without it in the membership after, within
    PERSEUS_TIMEOUT and a margin, well before PERSEUS_START_TIMEOUT."""
    hosts = tmp_path / "hosts.txt"
    write_hosts(hosts, 3)
    job = elastic_job(["-np", "3", "--min-np", "2", "--max-np", "4",
                       "--host-discovery-script", "cat %s" % hosts], steps=300,
                      step_sleep=0.05, worker_args=["--stop-on-update", "localhost:1"])
    job.env.update(PERSEUS_TIMEOUT="3", PERSEUS_START_TIMEOUT="20")
    job.start()
    job.wait_steps(3, 5)
    write_hosts(hosts, 4)
    code = job.wait().returncode
    assert code == 0, job.output()
    assert ("worker localhost:1 (rank 1 of epoch 2) has been stopped (SIGSTOP) for "
            "longer than PERSEUS_TIMEOUT" in job.stderr), job.output()
    assert "epoch 3: 3 workers (localhost:0, localhost:2, localhost:3)" in job.stderr, \
        job.output()
    records = job.records()
    stopped = [r["time"] for r in records["localhost:1"] if r["event"] == "stopping"][0]
    resumed = min(r["time"] for r in records["localhost:0"]
                  if r["event"] == "step" and r["epoch"] == 3)
    assert resumed - stopped <= 3 + relsupport.TIMEOUT_MARGIN_S, (resumed - stopped,
                                                                 job.output())
    done = final(records)
    for w in ("localhost:0", "localhost:2", "localhost:3"):
        assert done[w] and done[w][0]["size"] == 3 and done[w][0]["step"] == 300, (w, done)
