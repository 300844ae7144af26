"""The randomised elastic loop: several perseusrun jobs in elastic mode on this machine, each
bounded in time, taking random events in random order at random intervals, some of them while
the last event is still being recovered from:
  - kill: SIGKILL to a random current worker (never below --min-np, and never the last one
    that has run a step: perseusrun, as Horovod's elastic driver, blacklists a host whose
    every worker failed, and the workers added since may not have started);
  - add: one more slot in the discovery script's listing (never above --max-np).

Every run is checked: no hang (each run has a deadline), perseusrun exits 0, every step of
every worker ran in the membership perseusrun published for its epoch (the step's allreduce
names the slots and the ranks that took part: workers/elastic_random.py), surviving ranks
keep their relative order, the killed workers are gone and the job ends at the size the
events leave, every member at the same step. Then the reliability suite's leak check.

ELASTIC_RANDOM_EVENTS sets the number of events over all runs (default 50),
ELASTIC_RANDOM_RUNS the number of runs (default 5). The seed is printed and in every failure
message; ELASTIC_RANDOM_SEED=<seed> replays the same events in the same order with the same
intervals (the processes' timing still varies)."""

import os
import random
import re
import signal
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "reliability"))
import relsupport  # noqa: E402
from test_elastic_local import ElasticJob  # noqa: E402

EVENTS = int(os.environ.get("ELASTIC_RANDOM_EVENTS", "50"))
RUNS = max(1, min(EVENTS, int(os.environ.get("ELASTIC_RANDOM_RUNS", "5"))))
SEED = int(os.environ.get("ELASTIC_RANDOM_SEED") or random.SystemRandom().randrange(1 << 31))
START_NP, MIN_NP, MAX_NP = 3, 2, 5
# Per run: start-up and the end, plus per event the longest gap and a recovery (detection
# within PERSEUS_TIMEOUT, a new worker's start-up, the rendezvous) on a loaded 2-core machine.
RUN_BASE_S, PER_EVENT_S = 40, 12
WORKER = HERE / "workers" / "elastic_random.py"

pytestmark = pytest.mark.timeout(60 + RUNS * RUN_BASE_S + EVENTS * PER_EVENT_S)

EPOCH_LINE = re.compile(r"perseusrun: epoch (\d+): (\d+) workers \(([^)]*)\)")


def slot(wid):
    return int(wid.rsplit(":", 1)[1])


def write_hosts(path, slots):
    """Replaces the listing at once: the discovery script must never read a half-written
    file (an empty listing would remove every host)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text("localhost:%d\n" % slots)
    os.replace(tmp, path)


class RandomRun:
    def __init__(self, tmp_path, rng, events, label):
        self.rng, self.events, self.label = rng, events, label
        self.dir = Path(tmp_path) / label
        self.dir.mkdir()
        self.hosts = self.dir / "hosts.txt"
        self.finish = self.dir / "finish"
        self.listed = START_NP
        write_hosts(self.hosts, self.listed)
        self.expected = ["localhost:%d" % i for i in range(START_NP)]  # members, in rank order
        self.killed = {}  # worker id -> time of the kill
        self.log = []
        self.job = ElasticJob(
            self.dir, ["-np", START_NP, "--min-np", MIN_NP, "--max-np", MAX_NP,
                       "--host-discovery-script", "cat %s" % self.hosts],
            step_sleep=0.05, timeout=RUN_BASE_S + events * PER_EVENT_S, worker=WORKER,
            worker_args=["--finish-file", self.finish])

    def context(self):
        return "seed %d, %s, events %s" % (SEED, self.label, self.log)

    def fail(self, what):
        """Stops the job (to collect its output) and fails the test with `what`."""
        if self.job.proc.poll() is None:
            self.job.proc.send_signal(signal.SIGTERM)
        try:
            self.job.wait()
        except AssertionError:
            pass
        tails = {w: recs[-3:] for w, recs in self.job.records().items()}
        raise AssertionError("%s (%s)\nlast records: %s\n%s" % (
            what, self.context(), tails, self.job.output()))

    def wait_pid(self, wid, timeout=30):
        path = self.job.results / ("pid." + wid)
        deadline = time.time() + timeout
        while not path.exists():
            if time.time() > deadline:
                self.fail("worker %s never started" % wid)
            if self.job.proc.poll() is not None:
                self.fail("perseusrun ended early")
            time.sleep(0.05)
        return int(path.read_text())

    def gap(self):
        # A third of the events come before the last one can have been recovered from.
        if self.rng.random() < 1 / 3:
            return self.rng.choice([0.0, 0.2, 0.5])
        return self.rng.uniform(1.0, 3.0)

    def victims(self):
        """The members a kill may take: any but the last one that has run a step."""
        stepped = {w for w, recs in self.job.records().items()
                   if any(r.get("event") == "step" for r in recs)} & set(self.expected)
        return [w for w in self.expected if stepped - {w}]

    def event(self):
        deadline = time.time() + 60
        while True:
            victims = self.victims() if len(self.expected) > MIN_NP else []
            kinds = (["kill"] if victims else []) + \
                    ([] if len(self.expected) >= MAX_NP else ["add"])
            if kinds:
                break
            if time.time() > deadline:  # at --max-np with no member that has run a step
                self.fail("no added worker ran a step within 60 s")
            time.sleep(0.1)
        kind = self.rng.choice(kinds)
        if kind == "kill":
            victim = self.rng.choice(victims)
            try:
                os.kill(self.wait_pid(victim), signal.SIGKILL)
            except ProcessLookupError:
                self.fail("worker %s had ended before it was killed" % victim)
            self.killed[victim] = time.time()
            self.expected.remove(victim)
        else:
            self.listed += 1
            write_hosts(self.hosts, self.listed)
            victim = "localhost:%d" % (self.listed - 1)
            self.expected.append(victim)
        self.log.append("%s %s" % (kind, victim))

    def wait_stable(self, timeout):
        """Until every expected member has run a step in one membership made of exactly the
        expected members: no change is pending after that, so the finish flag is safe."""
        want = sorted(slot(w) for w in self.expected)
        deadline = time.time() + timeout
        while time.time() < deadline:
            records = self.job.records()
            epochs = set()
            for w in self.expected:
                steps = [r for r in records.get(w, ()) if r["event"] == "step"]
                if steps and steps[-1]["slots"] == want:
                    epochs.add(steps[-1]["epoch"])
                else:
                    epochs.add(None)
            if None not in epochs and len(epochs) == 1:
                return
            if self.job.proc.poll() is not None:
                self.fail("perseusrun ended early")
            time.sleep(0.1)
        self.fail("the job did not settle at %s within %d s" % (self.expected, timeout))

    def run(self):
        self.job.start()
        self.job.wait_steps(START_NP, 3)
        for _ in range(self.events):
            time.sleep(self.gap())
            self.event()
        self.wait_stable(timeout=60)
        self.finish.write_text("1")
        code = self.job.wait().returncode
        assert code == 0, "exit %d (%s)\n%s" % (code, self.context(), self.job.output())
        self.check()
        self.job.finish()

    def check(self):
        ctx = self.context()
        memberships = {int(e): m.split(", ") for e, n, m in EPOCH_LINE.findall(self.job.stderr)}
        assert memberships, "no membership published (%s)\n%s" % (ctx, self.job.output())
        records = self.job.records()
        for w, recs in records.items():
            for r in recs:
                if r["event"] != "step":
                    continue
                members = memberships.get(r["epoch"])
                assert members is not None, "step in unpublished epoch: %s (%s)" % (r, ctx)
                assert r["slots"] == sorted(slot(m) for m in members), (
                    "a step's participants differ from epoch %d's membership %s: %s (%s)"
                    % (r["epoch"], members, r, ctx))
                assert r["slot_counts"] == [1], ("a slot took part twice: %s (%s)" % (r, ctx))
                assert (r["rank"], r["size"]) == (members.index(w), len(members)), (r, ctx)
        for w, at in self.killed.items():
            late = [r for r in records.get(w, ()) if r["time"] > at + 0.5]
            assert not late, "killed worker %s went on: %s (%s)" % (w, late[:2], ctx)
        # Survivors keep their relative order: each membership lists the members of the one
        # before that stayed, in the same order, then the new workers.
        for e in sorted(memberships)[1:]:
            before = memberships.get(e - 1, [])
            stayed = [m for m in memberships[e] if m in before]
            assert stayed == [m for m in before if m in stayed], (e, memberships, ctx)
            assert memberships[e][:len(stayed)] == stayed, (e, memberships, ctx)
        done = {w: [r for r in recs if r["event"] == "done"] for w, recs in records.items()}
        finished = sorted(w for w, d in done.items() if d)
        assert finished == sorted(self.expected), (finished, self.expected, ctx)
        # The last membership holds the expected members. Newcomers are in the order they
        # became ready, not the order they were listed: a worker added later that starts
        # faster joins first (the epoch-by-epoch check above keeps them after the survivors).
        last = max(memberships)
        assert sorted(memberships[last]) == sorted(self.expected), (
            memberships[last], self.expected, ctx)
        ends = {(d[0]["epoch"], d[0]["size"], d[0]["step"]) for w, d in done.items() if d}
        assert len(ends) == 1 and next(iter(ends))[:2] == (last, len(self.expected)), (ends, ctx)


def test_random_kills_and_additions(tmp_path):
    print("elastic random loop: ELASTIC_RANDOM_SEED=%d, %d events over %d runs"
          % (SEED, EVENTS, RUNS))
    per_run = [EVENTS // RUNS + (1 if i < EVENTS % RUNS else 0) for i in range(RUNS)]
    kinds = []
    for i, events in enumerate(per_run):
        run = RandomRun(tmp_path, random.Random("%d/%d" % (SEED, i)), events, "run%d" % i)
        try:
            run.run()
        finally:
            relsupport.kill_tagged(run.job.tag)
        kinds += [entry.split()[0] for entry in run.log]
        print("run %d: %s" % (i, ", ".join(run.log)))
    assert len(kinds) == EVENTS
    if EVENTS >= 10:
        assert {"kill", "add"} <= set(kinds), kinds
