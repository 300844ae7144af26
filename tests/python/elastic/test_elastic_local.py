"""perseusrun's elastic mode on this machine, with real processes: a worker killed mid-loop, a
job that grows when the discovery script lists more slots, a job that drops below --min-np and
recovers, and the --elastic-timeout and --reset-limit failures. Every test is bounded in time
and ends with the reliability suite's leak check (no process of the job, no shared-memory
name left)."""

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "reliability"))
import relsupport  # noqa: E402

pytestmark = pytest.mark.timeout(180)

WORKER = HERE / "workers" / "elastic_loop.py"


class ElasticJob(relsupport.Job):
    """perseusrun in elastic mode running workers/elastic_loop.py (or `worker`); waiting,
    output and the leak check are the reliability suite's."""

    def __init__(self, tmp_path, flags, steps=40, step_sleep=0.1, timeout=120, worker_args=(),
                 worker=WORKER):
        self.tag = "eltag-" + uuid.uuid4().hex[:10]
        self.results = Path(tmp_path) / self.tag
        self.results.mkdir(parents=True)
        self.cluster = None
        self.cmd = ([relsupport.PY, "-m", "perseus.runner"] + [str(f) for f in flags]
                    + [relsupport.PY, str(worker), "--tag", self.tag, "--results",
                       str(self.results), "--steps", str(steps), "--step-sleep",
                       str(step_sleep)] + list(worker_args))
        self.env = relsupport.job_env()
        self.timeout = timeout
        self.shm_before = relsupport.shm_names()
        self.proc = self.started = self.ended = None

    def records(self):
        out = {}
        for path in self.results.glob("*.json"):
            with open(path) as f:
                # A worker may be writing its last line right now: only whole lines count.
                out[path.stem] = [json.loads(line) for line in f
                                  if line.endswith("\n") and line.strip()]
        return out

    def wait_steps(self, count, at_least, timeout=60):
        """Until `count` workers have recorded step >= at_least."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            done = [w for w, recs in self.records().items()
                    if any(r.get("event") == "step" and r["step"] >= at_least for r in recs)]
            if len(done) >= count:
                return
            if self.proc.poll() is not None:
                self.stop_and_collect()
                raise AssertionError("perseusrun ended early\n" + self.output())
            time.sleep(0.1)
        self.stop_and_collect()
        raise AssertionError("%d workers did not reach step %d\n%s"
                             % (count, at_least, self.output()))

    def stop_and_collect(self):
        """Stops perseusrun (it stops its workers) and keeps its output for the failure
        message: a job still running has not been read yet."""
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.stdout, self.stderr = self.proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.stdout, self.stderr = self.proc.communicate()
        self.returncode = self.proc.returncode

    def pid(self, worker_id):
        return int((self.results / ("pid." + worker_id)).read_text())

    def finish(self):
        relsupport.kill_tagged(self.tag)
        self.assert_clean()


@pytest.fixture
def elastic_job(tmp_path):
    jobs = []

    def make(*args, **kw):
        jobs.append(ElasticJob(tmp_path, *args, **kw))
        return jobs[-1]
    yield make
    for job in jobs:
        if getattr(job, "proc", None) is not None and job.proc.poll() is None:
            job.proc.kill()
            job.proc.communicate()
        job.finish()


def final(records):
    return {w: [r for r in recs if r["event"] == "done"] for w, recs in records.items()}


@pytest.mark.parametrize("plane", ["shm", "tcp"])
def test_killed_worker_leaves_and_the_job_finishes_on_the_rest(elastic_job, plane):
    tcp = ["--tcp"] if plane == "tcp" else []
    job = elastic_job(["-np", "4", "--min-np", "2", "-H", "localhost:4"] + tcp,
                      steps=60).start()
    job.wait_steps(4, 10)
    os.kill(job.pid("localhost:2"), signal.SIGKILL)
    killed = time.time()
    code = job.wait().returncode
    assert code == 0, job.output()
    records = job.records()
    for w in ("localhost:0", "localhost:1", "localhost:3"):
        # Every survivor's pending collective failed, within PERSEUS_TIMEOUT (job_env: 5 s).
        failed = [r for r in records[w] if r["event"] == "failed"]
        assert failed and failed[0]["time"] - killed < 5 + relsupport.TIMEOUT_MARGIN_S, failed
    done = final(records)
    assert not done["localhost:2"]
    for w in ("localhost:0", "localhost:1", "localhost:3"):
        assert done[w] and done[w][0]["size"] == 3 and done[w][0]["step"] == 60, (w, done)
    # Surviving ranks keep their relative order.
    assert [done[w][0]["rank"] for w in ("localhost:0", "localhost:1", "localhost:3")] == [0, 1, 2]
    assert "epoch 2: 3 workers" in job.stderr, job.output()


def test_a_slot_added_by_discovery_joins_and_the_job_grows(elastic_job, tmp_path):
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("localhost:2\n")
    job = elastic_job(["-np", "2", "--min-np", "2", "--max-np", "4",
                       "--host-discovery-script", "cat %s" % hosts], steps=80).start()
    job.wait_steps(2, 10)
    hosts.write_text("localhost:4\n")
    code = job.wait().returncode
    assert code == 0, job.output()
    done = final(job.records())
    assert sorted(done) == ["localhost:%d" % i for i in range(4)], done
    for w, recs in done.items():
        assert recs and recs[0]["size"] == 4 and recs[0]["step"] == 80, (w, done)
    grown = [r for r in job.records()["localhost:0"] if r["event"] == "hosts_updated"]
    assert grown, "the survivors never saw the new membership"
    joined = [r for r in job.records()["localhost:3"] if r["event"] == "joined"]
    assert joined[0]["step"] > 0, "the new worker did not take the others' step"


def test_below_min_np_waits_and_recovers_when_a_slot_is_added(elastic_job, tmp_path):
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("localhost:3\n")
    job = elastic_job(["-np", "3", "--min-np", "3", "--elastic-timeout", "60",
                       "--host-discovery-script", "cat %s" % hosts], steps=60).start()
    job.wait_steps(3, 10)
    os.kill(job.pid("localhost:1"), signal.SIGKILL)
    deadline = time.time() + 30
    while time.time() < deadline:  # both survivors saw the loss and wait for a membership
        recs = job.records()
        if all(any(r["event"] == "failed" for r in recs[w])
               for w in ("localhost:0", "localhost:2")):
            break
        time.sleep(0.2)
    time.sleep(2)
    hosts.write_text("localhost:4\n")
    code = job.wait().returncode
    assert code == 0, job.output()
    assert "--min-np is 3: waiting up to 60 s" in job.stderr, job.output()
    done = final(job.records())
    for w in ("localhost:0", "localhost:2", "localhost:3"):
        assert done[w] and done[w][0]["size"] == 3 and done[w][0]["step"] == 60, (w, done)


def test_elastic_timeout_fails_the_job_with_what_it_waited_for(elastic_job, tmp_path):
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("localhost:3\n")
    job = elastic_job(["-np", "3", "--min-np", "3", "--elastic-timeout", "4",
                       "--host-discovery-script", "cat %s" % hosts], steps=400).start()
    job.wait_steps(3, 5)
    os.kill(job.pid("localhost:0"), signal.SIGKILL)
    code = job.wait().returncode
    assert code != 0, job.output()
    assert ("timed out after 4 s (--elastic-timeout) waiting for at least 3 workers (--min-np) "
            "from the host discovery script cat %s" % hosts) in job.stderr, job.output()


def test_reset_limit_fails_the_job(elastic_job):
    job = elastic_job(["-np", "3", "--min-np", "1", "--reset-limit", "1", "-H", "localhost:3"],
                      steps=400).start()
    job.wait_steps(3, 5)
    os.kill(job.pid("localhost:2"), signal.SIGKILL)
    job.wait_steps(2, 15)  # the first reset is allowed
    os.kill(job.pid("localhost:1"), signal.SIGKILL)
    code = job.wait().returncode
    assert code != 0, job.output()
    assert "the membership changed 1 times, the --reset-limit; stopping" in job.stderr, \
        job.output()


def test_no_hosts_at_start_fails_after_the_elastic_timeout(elastic_job, tmp_path):
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("")
    job = elastic_job(["-np", "2", "--elastic-timeout", "2",
                       "--host-discovery-script", "cat %s" % hosts]).start()
    code = job.wait().returncode
    assert code != 0, job.output()
    assert "waiting for 2 slots (--min-np)" in job.stderr, job.output()


def test_repeated_losses_and_regrowth_reinit_in_the_same_processes(elastic_job, tmp_path):
    """Three memberships lost one worker at a time, then growth back: the survivors shut down
    and initialise again in the same process each time with another rank and size, and
    register a process set anew in each membership of 3 or more."""
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("localhost:4\n")
    job = elastic_job(["-np", "4", "--min-np", "2", "--host-discovery-script",
                       "cat %s" % hosts], steps=120, worker_args=["--process-set"]).start()
    job.wait_steps(4, 5)
    os.kill(job.pid("localhost:0"), signal.SIGKILL)
    job.wait_steps(3, 25)
    os.kill(job.pid("localhost:2"), signal.SIGKILL)
    job.wait_steps(2, 45)
    hosts.write_text("localhost:6\n")  # slots 4 and 5 are new; 0 and 2 stay blacklisted
    code = job.wait().returncode
    assert code == 0, job.output()
    done = final(job.records())
    survivors = ["localhost:1", "localhost:3", "localhost:4", "localhost:5"]
    for w in survivors:
        assert done[w] and done[w][0]["size"] == 4 and done[w][0]["step"] == 120, (w, done)
    assert [done[w][0]["rank"] for w in survivors] == [0, 1, 2, 3]
    epochs = {r["epoch"] for r in job.records()["localhost:1"]}
    assert epochs == {1, 2, 3, 4}, epochs


def test_a_hung_worker_is_reported_by_its_peers_and_removed(elastic_job):
    """A worker that stops (SIGSTOP) but does not exit: the driver sees no exit. Its peers'
    collectives fail within PERSEUS_TIMEOUT naming it and they report it through the store;
    the driver also sees the process stopped. It cannot report anything itself, so the driver
    stops it as soon as either says so (the peers' report, or PERSEUS_TIMEOUT stopped): the
    others go on without it within PERSEUS_TIMEOUT and a fraction of a second, not waiting
    for it in the next rendezvous."""
    job = elastic_job(["-np", "3", "--min-np", "2", "-H", "localhost:3"], steps=60).start()
    job.wait_steps(3, 10)
    stopped = time.time()
    os.kill(job.pid("localhost:1"), signal.SIGSTOP)
    code = job.wait().returncode
    assert code == 0, job.output()
    named = "worker localhost:1 (rank 1 of epoch 1) did not respond for PERSEUS_TIMEOUT"
    seen_stopped = ("worker localhost:1 (rank 1 of epoch 1) has been stopped (SIGSTOP) for "
                    "longer than PERSEUS_TIMEOUT")
    assert named in job.stderr or seen_stopped in job.stderr, job.output()
    resumed = min(r["time"] for r in job.records()["localhost:0"]
                  if r["event"] == "step" and r["epoch"] > 1)
    limit = float(job.env["PERSEUS_TIMEOUT"]) + relsupport.TIMEOUT_MARGIN_S
    assert resumed - stopped <= limit, (resumed - stopped, job.output())
    done = final(job.records())
    for w in ("localhost:0", "localhost:2"):
        assert done[w] and done[w][0]["size"] == 2 and done[w][0]["step"] == 60, (w, done)


def test_horovod_3264_a_member_lost_while_the_next_membership_starts(elastic_job):
    """horovod#3264's case: a second worker dies while the survivors rendezvous for the
    membership that replaces the first loss. The driver gives up on that membership (its abort
    key ends the survivors' wait at once, not at PERSEUS_START_TIMEOUT) and publishes the
    next; nobody else dies."""
    job = elastic_job(["-np", "4", "--min-np", "2", "-H", "localhost:4"], steps=60,
                      worker_args=["--exit-on-failure", "localhost:1"]).start()
    job.wait_steps(4, 10)
    os.kill(job.pid("localhost:0"), signal.SIGKILL)
    code = job.wait().returncode
    assert code == 0, job.output()
    assert "epoch 3: 2 workers (localhost:2, localhost:3)" in job.stderr, job.output()
    records = job.records()
    done = final(records)
    for w in ("localhost:2", "localhost:3"):
        assert done[w] and done[w][0]["size"] == 2 and done[w][0]["step"] == 60, (w, done)
    exited = [r for r in records["localhost:1"] if r["event"] == "failed"][0]["time"] + 1.0
    rejoined = [r for r in records["localhost:2"] if r["event"] == "joined" and r["epoch"] == 3]
    assert rejoined and rejoined[0]["time"] - exited < 8, (rejoined, exited)


def test_sigterm_to_perseusrun_stops_every_worker(elastic_job):
    job = elastic_job(["-np", "3", "--min-np", "2", "-H", "localhost:3"], steps=1000).start()
    job.wait_steps(3, 5)
    job.proc.send_signal(signal.SIGTERM)
    code = job.wait().returncode
    assert code == 128 + signal.SIGTERM, job.output()
    assert "received SIGTERM; stopping all workers" in job.stderr, job.output()


def test_workers_stop_when_perseusrun_is_killed(elastic_job):
    """perseusrun SIGKILLed: its workers find the store gone at their next
    host_updates_pending() and exit instead of training on unsupervised."""
    job = elastic_job(["-np", "2", "--min-np", "2", "-H", "localhost:2"], steps=1000).start()
    job.wait_steps(2, 5)
    job.proc.kill()
    job.proc.communicate()
    deadline = time.time() + 20
    while relsupport.tagged_pids(job.tag) and time.time() < deadline:
        time.sleep(0.2)
    assert not relsupport.tagged_pids(job.tag), relsupport.describe_pids(
        relsupport.tagged_pids(job.tag))
