"""The elastic chaos soak: a 4-rank elastic CPU job (perseusrun --min-np 2 --max-np 5 with a
host discovery script) training a small MLP (bench/chaos/worker.py: TorchState, a commit every
5 steps; worker_mx.py with --framework mxnet: GluonState) takes --faults faults at random
times, one after another, and the soak measures how it comes through each.

Faults (the mix of docs/RELIABILITY.md's soak: about 60% kills, 10% stops, 30% grow/shrink):
  kill           SIGKILL of a random member;
  exit@<phase>   a member exits at a named fragile phase (perseus.common.fault_injection):
                 negotiation, commit, allreduce (inside a large one), broadcast (the state sync
                 after a reset, made to happen by growing or shrinking the job), join (the
                 announcement of a new worker, made to happen by growing it);
  stop           SIGSTOP of a random member for PERSEUS_TIMEOUT + 2 s, then SIGCONT;
  grow / shrink  a slot added to (removed from) the discovery script's listing: the job's
                 target size moves by one, between --min-np + 1 and --max-np.
Kills and stops remove members that no fault would bring back (a failed worker's slot is
blacklisted for good), so after each fault the soak lists a new slot for every member that the
job lacks against its target size, as a cluster's scheduler replaces a lost node: a
`replace`, timed as a new worker like a grow but not counted as a fault (the mix above is the
faults'). A kill or stop that would leave fewer than --min-np members waits for the
replacements first (a grow when none is coming). perseusrun keeps --spare-workers processes
started ahead of the new workers (docs/elastic.md, "Spare workers"); every --cold-every-th job
runs without them, so that its new workers time a cold start (a new process: interpreter,
imports, warm-up).

Per fault it records (<out>/faults.jsonl) the time from the fault to the first step completed
in a later membership, for a grow the new worker's time from the listing to its first step with
its per-stage clock (stages(): perseusrun's --verbose log, stamped as it is written, and the
worker's boot record), and whether the job hung (no step for --hang-s). Per job (a job takes
--faults-per-job faults, then finishes and the next one starts): entries whose parameter
checksums differ across ranks (divergent replicas), entries that resume before the newest
completed commit (lost commits), and the processes and /dev/shm segments left once perseusrun
has exited. report.py turns the file into the results table.

    python bench/chaos/soak.py --faults 1000 --seed 7 --out /tmp/chaos
    python bench/chaos/soak.py --minutes 8 --seed 8 --out /tmp/chaos8   # ends within 8 min
    python bench/chaos/report.py /tmp/chaos /tmp/chaos8 > bench/results/chaos_soak.md
    bench/chaos/parallel_soak.sh 7.5 3811 3 5 /tmp/out   # 3 soaks at once on CPUs 0-4, 5-9, 10-14
Per new worker (grow or replace) the record says how it started (stages' spare_state: a spare
that had warmed up, one still warming up; none: a new process), for report.py's split.

It runs the perseus that `python -c "import perseus"` finds (the installed package), or with
PERSEUS_BUILD_DIR the source tree's python/ over that build (tests/python/reliability's
job_env()); it needs the source tree only for itself and tests/python/reliability/relsupport.py.

The seed is printed; the same seed gives the same faults in the same order with the same gaps
(the processes' timing still varies)."""

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "tests" / "python" / "reliability"))
import relsupport  # noqa: E402  (the job environment and the leak checks of the test suites)

WORKERS = {"torch": HERE / "worker.py", "mxnet": HERE / "worker_mx.py"}
MIN_NP, START_NP, MAX_NP = 2, 4, 5
PHASES = ("negotiation", "commit", "allreduce", "broadcast", "join")
# (kind, weight): 35% kills at random times + 25% aimed at a phase, 10% stops, 30% resizing.
MIX = [("kill", 35)] + [("exit@" + p, 5) for p in PHASES] + [("stop", 10), ("resize", 30)]
KINDS = [k for k, _ in MIX]
# With --minutes: the last fault starts this long before the end of the time left for faults...
INJECT_RESERVE_S = 45
# ...which ends this long before the budget, so that finishing the job (perseusrun's own stop
# and the leftover checks, their waits cut to fit) still fits.
END_S = 30


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--faults", type=int, default=1000)
    p.add_argument("--framework", choices=sorted(WORKERS), default="torch",
                   help="the worker: TorchState (worker.py) or GluonState (worker_mx.py)")
    p.add_argument("--faults-per-job", type=int, default=25)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--out", required=True)
    p.add_argument("--timeout", type=float, default=3.0, help="PERSEUS_TIMEOUT of the job")
    p.add_argument("--start-timeout", type=float, default=30.0, help="PERSEUS_START_TIMEOUT")
    p.add_argument("--hang-s", type=float, default=60.0)
    p.add_argument("--gap", type=float, nargs=2, default=(0.2, 2.0), metavar=("MIN", "MAX"),
                   help="random pause between a recovery and the next fault (seconds)")
    p.add_argument("--step-sleep", type=float, default=0.05)
    p.add_argument("--spare-workers", type=int, default=MAX_NP - MIN_NP,
                   help="perseusrun --spare-workers: processes started ahead of a grow, so that "
                   "the new worker skips its imports (0: every new worker starts cold)")
    p.add_argument("--cold-every", type=int, default=4,
                   help="every N-th job runs with --spare-workers 0: its new workers time a "
                   "cold start (0: never)")
    p.add_argument("--minutes", type=float, default=None,
                   help="the whole soak's wall time, its end included: no fault is injected "
                   "in the last %d s, and every wait is cut at the end" % (
                       INJECT_RESERVE_S + END_S))
    p.add_argument("--only", nargs="+", choices=KINDS, default=None,
                   help="inject only these kinds of fault (in the mix's proportions)")
    return p.parse_args()


class Tail:
    """The lines appended to a file since the last read."""

    def __init__(self, path):
        self.path, self.offset, self.partial = Path(path), 0, ""

    def lines(self):
        if not self.path.exists():
            return []
        with open(self.path) as f:
            f.seek(self.offset)
            text = f.read()
            self.offset = f.tell()
        text, self.partial = self.partial + text, ""
        lines = text.split("\n")
        self.partial = lines.pop()
        return lines


class StampedLines:
    """perseusrun's stderr, copied to a file by a thread that notes when each line came: the
    driver's log has no times, and the soak reads it only between faults."""

    def __init__(self, stream, path):
        self._lines, self._lock = [], threading.Lock()
        self._thread = threading.Thread(target=self._pump, args=(stream, path), daemon=True)
        self._thread.start()

    def _pump(self, stream, path):
        with open(path, "w") as f:
            for line in stream:
                with self._lock:
                    self._lines.append((time.time(), line.rstrip("\n")))
                f.write(line)
                f.flush()

    def lines(self):
        with self._lock:
            taken, self._lines = self._lines, []
        return taken

    def close(self):
        self._thread.join(timeout=10)


class Job:
    """One perseusrun job and what it has recorded so far."""

    def __init__(self, root, args, index):
        self.dir = Path(root) / ("job%03d" % index)
        cold = args.cold_every > 0 and index % args.cold_every == args.cold_every - 1
        self.spares = 0 if cold else args.spare_workers
        self.results = self.dir / "results"
        self.results.mkdir(parents=True)
        self.hosts = self.dir / "hosts.txt"
        self.finish_file = self.dir / "finish"
        self.exits = self.dir / "exits.txt"
        self.tag = "chaostag-" + uuid.uuid4().hex[:10]
        self.listed = START_NP
        self.write_hosts()
        self.records, self.epochs = [], {}  # epochs: number -> (time seen, [worker ids])
        self.failed_slots = set()
        self.spawned = []  # (time, worker id) of each worker perseusrun started
        self.spare_state = {}  # (worker id, started) -> "warm" / "warming": a spare's state
        self._worker_tails = {}
        self._exits = Tail(self.exits)
        self.exit_records = []
        env = relsupport.job_env(PERSEUS_TIMEOUT=args.timeout,
                                 PERSEUS_START_TIMEOUT=args.start_timeout,
                                 PERSEUS_TEST_EXIT_RECORD=self.exits)
        # --verbose: perseusrun says when it starts each worker (a grow's first stage).
        cmd = [relsupport.PY, "-m", "perseus.runner", "--verbose", "-np", str(START_NP),
               "--min-np",
               str(MIN_NP), "--max-np", str(MAX_NP), "--spare-workers",
               str(self.spares), "--host-discovery-script",
               "cat %s" % self.hosts, relsupport.PY, str(WORKERS[args.framework]), "--tag",
               self.tag,
               "--results", str(self.results), "--finish-file", str(self.finish_file),
               "--step-sleep", str(args.step_sleep)]
        self.shm_before = relsupport.shm_names()
        with open(self.dir / "perseusrun.out", "w") as out:
            self.proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.PIPE,
                                         text=True, start_new_session=True)
        self._err = StampedLines(self.proc.stderr, self.dir / "perseusrun.err")

    def write_hosts(self):
        tmp = self.hosts.with_suffix(".tmp")  # never a half-written listing
        tmp.write_text("localhost:%d\n" % self.listed)
        os.replace(tmp, self.hosts)

    def poll(self):
        """Reads what was appended: worker records, epochs perseusrun published, exits."""
        for now, line in self._err.lines():
            if line.startswith("perseusrun: started worker "):
                wid = line.split()[3]
                self.spawned.append((now, wid))
                if " from spare " in line:  # the driver says whether it had warmed up
                    self.spare_state[(wid, now)] = "warming" if line.endswith(
                        "still warming up") else "warm"
            elif line.startswith("perseusrun: epoch ") and " workers (" in line:
                number = int(line.split()[2].rstrip(":"))
                members = line.split("(", 1)[1].rstrip(")").split(", ")
                self.epochs[number] = (now, members)
            elif line.startswith("perseusrun: worker ") and (
                    "signal 9" in line or "exited with code" in line):
                # A failed worker's slot is blacklisted for good (no cooldown): never free.
                self.failed_slots.add(int(line.split()[2].rsplit(":", 1)[1]))
        for path in self.results.glob("*.json"):
            tail = self._worker_tails.setdefault(path, Tail(path))
            self.records += [json.loads(t) for t in tail.lines() if t.strip()]
        for line in self._exits.lines():
            if line.strip():
                phase, wid, at = line.split()
                self.exit_records.append({"phase": phase, "worker": wid, "time": float(at)})

    def newest_epoch(self, at=None):
        seen = [e for e, (t, _) in self.epochs.items() if at is None or t <= at]
        return max(seen) if seen else 0

    def members(self):
        return list(self.epochs[self.newest_epoch()][1]) if self.epochs else []

    def started_members(self):
        """The newest membership's members whose pid file names a live process (a new worker
        writes it once init() has returned: one published a moment ago may not have yet, and
        a slot listed again may still hold its former worker's)."""
        return [w for w in self.members() if self.pid(w) is not None and alive(self.pid(w))]

    def pid(self, wid):
        try:
            return int((self.results / ("pid." + wid)).read_text())
        except (OSError, ValueError):
            return None

    def steps_after(self, at, epoch_above=0):
        return [r for r in self.records if r["event"] == "step" and r["time"] > at
                and r["epoch"] > epoch_above]

    def stable(self):
        """Every member of the newest membership has completed a step in it."""
        e = self.newest_epoch()
        if not e:
            return False
        stepped = {r["worker"] for r in self.records if r["event"] == "step" and r["epoch"] == e}
        return set(self.epochs[e][1]) <= stepped

    def alive(self):
        return self.proc.poll() is None


class Soak:
    def __init__(self, args):
        self.args = args
        self.rng = random.Random(args.seed)
        self.out = Path(args.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.faults_file = open(self.out / "faults.jsonl", "a")
        self.jobs_file = open(self.out / "jobs.jsonl", "a")
        self.job, self.job_index, self.job_faults = None, 0, 0
        self.target = START_NP  # the size that the faults' replacements keep the job at
        self.pending_grows, self.claimed = [], set()
        self.deadline = None if args.minutes is None else time.time() + 60 * args.minutes - END_S
        self.mix = [(k, w) for k, w in MIX if args.only is None or k in args.only]

    def left(self, cap):
        """`cap` seconds, or fewer when --minutes would run out first."""
        if self.deadline is None:
            return cap
        return max(0.0, min(cap, self.deadline - time.time()))

    # --- the job's lifetime -------------------------------------------------------------------
    def start_job(self):
        self.job = Job(self.out, self.args, self.job_index)
        self.job_index += 1
        self.job_faults = 0
        self.target = START_NP
        if not self.wait(self.job.stable, self.left(120)):
            self.end_job("did not start")
            return False
        return True

    def wait(self, cond, timeout):
        deadline = time.time() + timeout
        while time.time() < deadline:
            self.job.poll()
            if cond():
                return True
            if not self.job.alive():
                return False
            time.sleep(0.05)
        return False

    def end_job(self, problem=None):
        """Finishes the job (or stops it after a problem) and checks what it leaves behind."""
        job = self.job
        if problem is None:
            job.finish_file.write_text("1")
            finish_s = max(15.0, self.left(90))
            try:
                job.proc.wait(timeout=finish_s)
            except subprocess.TimeoutExpired:
                problem = "did not finish within %.0f s of the finish flag" % finish_s
        if job.alive():
            job.proc.send_signal(signal.SIGTERM)
            try:
                job.proc.wait(timeout=10)  # perseusrun stops its workers within 3 s
            except subprocess.TimeoutExpired:
                job.proc.kill()
                job.proc.wait()
        job._err.close()
        job.poll()
        self.resolve_grows(final=True)
        self.claimed = set()
        left = self.leftover_pids(job, grace=max(3.0, min(15.0, self.left(15))))
        relsupport.kill_tagged(job.tag)
        summary = {"job": job.dir.name, "faults": self.job_faults, "problem": problem,
                   "exit": job.proc.returncode, "epochs": job.newest_epoch(),
                   "leftover_pids": left, "leftover_shm": self.leftover_shm(job)}
        summary.update(check_records(job.records))
        self.jobs_file.write(json.dumps(summary) + "\n")
        self.jobs_file.flush()
        print("job %s: %s" % (job.dir.name, summary), flush=True)
        self.job = None

    @staticmethod
    def leftover_pids(job, grace=15):
        deadline = time.time() + grace
        left = relsupport.tagged_pids(job.tag)
        while left and time.time() < deadline:
            time.sleep(0.2)
            left = relsupport.tagged_pids(job.tag)
        return [relsupport.describe_pids([pid]) for pid in left]

    @staticmethod
    def leftover_shm(job):
        ids = {r["job"] for r in job.records if r.get("job")}
        return sorted(n for n in relsupport.leaked_shm(job.shm_before)
                      if any(n.startswith("perseus-%s-" % i) for i in ids))

    # --- faults -------------------------------------------------------------------------------
    def draw(self):
        kinds, weights = zip(*self.mix)
        return self.rng.choices(kinds, weights)[0]

    def choose(self, kind):
        """The fault to inject for `kind` (drawn from the mix) in the job's state now; None
        when it must wait for the new workers still starting (settle_grows() first, then the
        same kind again: drawing anew would bias the mix against the kinds that wait)."""
        members = len(self.job.members())
        size = members + len(self.pending_grows)  # with the new workers still starting
        if kind != "resize" and members <= MIN_NP:
            # A removal would leave fewer than --min-np: the replacements first, unless none
            # is coming (then the job grows).
            return None if self.pending_grows else "grow"
        if kind == "exit@join" and size >= MAX_NP:
            kind = "exit@commit"
        if kind == "resize":
            # The listing is a slot count: a shrink would unlist the new workers still
            # starting, so it waits for them.
            grow = self.target < MAX_NP and (self.target <= MIN_NP + 1
                                              or self.rng.random() < 0.5)
            if not grow and self.pending_grows:
                return None
            kind = "grow" if grow else "shrink"
        return kind

    def replace_lost(self):
        """Lists a new slot for each member that the job lacks against its target size (the
        members lost to the last fault, less the new workers still starting): each is a
        `replace`, timed as a grow is but not counted as a fault."""
        job = self.job
        lacking = self.target - len(job.members()) - len(self.pending_grows)
        for _ in range(max(0, min(lacking, MAX_NP - len(job.members())))):
            self.pending_grows.append({"kind": "replace", "job": job.dir.name,
                                       "spares": job.spares, "time": self.resize(True),
                                       "epoch": job.newest_epoch()})
            self.pending_grows[-1]["at"] = self.pending_grows[-1]["time"]

    def settle_grows(self):
        """Waits until every new worker still starting has taken its first step (at most twice
        PERSEUS_START_TIMEOUT; then those that did not are written as problems)."""
        # The launcher publishes a new worker at most PERSEUS_START_TIMEOUT after starting it,
        # and stops it if it has not joined another PERSEUS_START_TIMEOUT later.
        deadline = time.time() + self.left(2 * self.args.start_timeout + 10)
        while self.pending_grows and time.time() < deadline and self.job.alive():
            self.job.poll()
            self.resolve_grows()
            time.sleep(0.1)
        if self.pending_grows:
            self.resolve_grows(final=True)

    def inject(self, kind):
        """Injects one fault; returns (its time, the worker it hit or added, or None)."""
        job = self.job
        if kind in ("grow", "shrink"):
            self.target += 1 if kind == "grow" else -1
            return self.resize(kind == "grow"), None
        victim = self.rng.choice(job.started_members())
        if kind.startswith("exit@"):
            return self.aim(kind[5:], victim)
        pid = job.pid(victim)
        if kind == "kill":
            os.kill(pid, signal.SIGKILL)
            return time.time(), victim
        at = time.time()
        os.kill(pid, signal.SIGSTOP)
        time.sleep(self.args.timeout + 2)
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass  # the launcher gave up on it and killed it: as it should
        return at, victim

    def resize(self, grow):
        job = self.job
        if grow:  # one more slot that the launcher can use
            job.poll()
            job.listed += 1
            while job.listed - 1 in job.failed_slots:
                job.listed += 1
        else:  # remove the highest listed slot that has a member (and any above it)
            slots = [int(w.rsplit(":", 1)[1]) for w in job.members()]
            job.listed = max(slots)
        at = time.time()
        job.write_hosts()
        return at

    def aim(self, phase, victim):
        """Arms `victim` for `phase`; for the phases that need a membership change, makes one:
        a grow for `join` (the members see it once the new worker is ready), a kill of another
        member for `broadcast` (the reset after it syncs the state; a grow when that would
        leave fewer than --min-np). The fault's time is the exit's, read from the hook's
        record."""
        job = self.job
        slow = phase in ("join", "broadcast")
        (job.results / ("arm." + victim)).write_text("%s %d" % (phase, 2000 if slow else 40))
        if slow:
            self.wait(lambda: any(r["event"] == "armed" and r["worker"] == victim
                                  for r in job.records[-400:]), 10)
            others = [w for w in job.started_members() if w != victim]
            if phase == "broadcast" and len(others) > MIN_NP:
                os.kill(job.pid(self.rng.choice(others)), signal.SIGKILL)
            else:
                self.resize(grow=True)
                self.pending_grows.append({"at": time.time(), "epoch": job.newest_epoch(),
                                           "job": job.dir.name, "via": phase})
        before = len(job.exit_records)
        if self.wait(lambda: len(job.exit_records) > before, 120 if slow else 30):
            hit = job.exit_records[before]
            return hit["time"], hit["worker"]
        (job.results / ("arm." + victim)).write_text("%s 0" % phase)  # disarmed
        return None, victim

    def measure(self, kind, at, victim, epoch):
        """Waits for the first step completed in a membership newer than `epoch` after the
        fault; for a grow also the new worker's first step."""
        job = self.job
        result = {"kind": kind, "job": job.dir.name, "worker": victim, "time": at,
                  "spares": job.spares}
        last = time.time()
        seen = len(job.records)
        while True:
            job.poll()
            # Progress is a step: memberships that fail and reset over and over (records, no
            # step) are a hang too.
            if any(r["event"] == "step" for r in job.records[seen:]):
                last = time.time()
            seen = len(job.records)
            if kind == "grow":  # the new worker's first step comes later: resolve_grows()
                steps = job.steps_after(at)
                if steps:
                    self.pending_grows.append(dict(result, epoch=epoch, at=at))
                    return None
            else:
                steps = job.steps_after(at, epoch)
                if steps:
                    result["resume_s"] = steps[0]["time"] - at
                    result["stall_s"] = self.stall(at, steps[0]["time"])
                    return result
            if not job.alive():
                result["problem"] = "perseusrun exited %s" % job.proc.returncode
                return result
            if time.time() - last > self.args.hang_s:
                result["problem"] = "hang: no step for %.0f s" % self.args.hang_s
                return result
            if not self.left(1):
                result["problem"] = "cut short: --minutes ran out before it resumed"
                return result
            time.sleep(0.05)

    def stall(self, at, until):
        """The longest time without any completed step between the fault and `until`: for a
        grow, how long the members stopped training to take the new worker in."""
        times = sorted(r["time"] for r in self.job.records
                       if r["event"] == "step" and at < r["time"] <= until)
        return max(b - a for a, b in zip([at] + times, times + [until]))

    def newcomer(self, at):
        """(worker id, the time perseusrun started it, its first step's time) of the first
        worker started after `at` that no earlier grow claimed and that has completed a step.
        Every worker started after a job's first membership is a grow's (a failed worker's slot
        is never reused), in the order of the grows."""
        job = self.job
        for started, w in job.spawned:
            if started <= at or (w, started) in self.claimed:
                continue
            first = [r["time"] for r in job.records if r["worker"] == w and r["event"] == "step"
                     and r["time"] > started]
            return (w, started, first[0]) if first else None
        return None

    def stages(self, at, wid, started, first_step):
        """A new worker's per-stage clock (seconds each, None where a record is missing), from
        perseusrun's log (when it started the worker, when it published it) and the worker's
        records (worker.py's boot record, its first entry)."""
        job = self.job
        mine = [r for r in job.records if r["worker"] == wid and started < r["time"]]
        boot = next((r for r in mine if r["event"] == "boot"), None)
        entry = next((r["time"] for r in mine if r["event"] == "entry"), None)
        published = next((t for e, (t, members) in sorted(job.epochs.items())
                          if t > started and wid in members), None)
        # Each stage runs from the previous mark to its own: "discovery" from the listing to
        # perseusrun starting the process, "interpreter" to the script's first line, "imports"
        # to their end, "until_published" to perseusrun publishing it (init() said it was
        # ready), "rendezvous" to init() returning, "build" to the model built, "sync" to the
        # training function's entry, "first_step" to the first step completed.
        # A spare (perseusrun --spare-workers) started before it was given the slot: its
        # "interpreter" stage is None, its "imports" the rest of them if any were left.
        spare = boot is not None and boot["started"] < started
        spare_state = job.spare_state.get((wid, started))  # None: started cold
        marks = [("discovery", started),
                 ("interpreter", None if spare else boot and boot["started"]),
                 ("imports", boot and boot["imported"]),
                 ("until_published", published),
                 ("rendezvous", boot and boot["joined"]), ("build", boot and boot["time"]),
                 ("sync", entry), ("first_step", first_step)]
        out, before = {"spare": spare, "spare_state": spare_state}, at
        for name, mark in marks:
            if spare and (name == "interpreter" or name == "imports" and mark < started):
                out[name] = None  # before it was given the slot
                continue
            out[name] = None if mark is None or before is None else round(mark - before, 3)
            before = mark
        return out

    def resolve_grows(self, final=False):
        """Writes the grows whose new worker has completed its first step: the fault's resume
        time is that step (the first of the membership with it), its stall the members' longest
        pause meanwhile. At the end of a job (`final`) the others are written as problems."""
        left = []
        for g in self.pending_grows:
            found = self.newcomer(g["at"])
            if found:
                wid, started, first = found
                self.claimed.add((wid, started))
                result = dict(g, newcomer=wid, newcomer_s=first - g["at"],
                              resume_s=first - g["at"], stall_s=self.stall(g["at"], first),
                              stages=self.stages(g["at"], wid, started, first))
            elif final:
                spawned = [w for t, w in self.job.spawned if t > g["at"]]
                result = dict(g, problem=(
                    "cut short: --minutes ran out before the new worker's first step"
                    if not self.left(1) else "the new worker never completed a step" if spawned
                    else "perseusrun started no worker for the listed slot"))
            else:
                left.append(g)
                continue
            if "kind" in result:  # grows made by aim() are recorded as their exit's fault
                self.write(result)
        self.pending_grows = left

    def write(self, result):
        self.faults_file.write(json.dumps(result) + "\n")
        self.faults_file.flush()
        print("fault %s: %s" % (result.get("number"), result), flush=True)

    def one_fault(self, number):
        time.sleep(self.rng.uniform(*self.args.gap))
        drawn = self.draw()
        kind = self.choose(drawn)
        if kind is None:
            self.settle_grows()
            kind = self.choose(drawn) or "grow"
        epoch_at_start = self.job.newest_epoch()
        at, victim = self.inject(kind)
        if at is None:  # an aimed exit whose phase never came
            result = {"kind": kind, "job": self.job.dir.name, "worker": victim,
                      "problem": "not fired"}
        else:
            epoch = self.job.newest_epoch(at) if kind.startswith("exit@") else epoch_at_start
            result = self.measure(kind, at, victim, epoch)
            if result is None:  # a grow: written once its new worker has stepped
                self.pending_grows[-1].update(number=number, drawn=drawn)
                return {}
        result.update(number=number, drawn=drawn)
        self.write(result)
        return result

    def run(self):
        number = 0
        started = time.time()
        self.stopping = False

        def stop(signum, frame):  # SIGTERM/SIGINT: end after this fault, checks included
            self.stopping = True
        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        while number < self.args.faults:
            if self.left(INJECT_RESERVE_S) < INJECT_RESERVE_S:
                print("--minutes: %.0f s passed, stopping after %d faults"
                      % (time.time() - started, number), flush=True)
                break
            if self.stopping:
                print("stopped by a signal after %d faults" % number, flush=True)
                break
            if self.job is None and not self.start_job():
                continue
            result = self.one_fault(number)
            self.resolve_grows()
            if not result.get("problem") and self.job.alive():
                self.replace_lost()
            if result.get("problem") != "not fired":
                number += 1
                self.job_faults += 1
            problem = result.get("problem")
            if problem and problem != "not fired":
                self.end_job(problem)
            elif not self.wait(self.job.stable, self.left(self.args.hang_s)):
                self.end_job("did not settle within %.0f s" % self.args.hang_s
                             if self.left(1) else "cut short: --minutes ran out")
            elif self.job_faults >= self.args.faults_per_job:
                self.finish_job()
        if self.job is not None:
            self.finish_job()

    def finish_job(self):
        """Lets the new workers still starting take their first step, then ends the job."""
        self.settle_grows()
        self.end_job()


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def check_records(records):
    """Divergent replicas and lost commits in one job's records (time order)."""
    divergent, lost, newest_commit = [], [], 0
    for r in sorted(records, key=lambda r: r["time"]):
        if r["event"] == "commit":
            newest_commit = max(newest_commit, r["step"])
        elif r["event"] == "entry":
            if not r["equal"]:
                divergent.append(r)
            if r["step"] < newest_commit:
                lost.append(dict(r, newest_commit=newest_commit))
    entries = sum(1 for r in records if r["event"] == "entry")
    return {"entries": entries, "divergent": divergent[:5], "divergent_count": len(divergent),
            "lost_commits": lost[:5], "lost_commit_count": len(lost)}


def main():
    args = parse()
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1 << 31)
    print("chaos soak: --seed %d --faults %d" % (args.seed, args.faults), flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    with open(Path(args.out) / "command.json", "w") as f:
        json.dump({"argv": sys.argv, "seed": args.seed, "started": time.time(),
                   "cpus": len(os.sched_getaffinity(0)), "loadavg": os.getloadavg()}, f)
    soak = Soak(args)
    try:
        soak.run()
    finally:
        if soak.job is not None and soak.job.alive():
            soak.end_job("soak interrupted")


if __name__ == "__main__":
    main()
