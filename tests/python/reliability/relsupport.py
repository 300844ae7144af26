"""Shared helpers of the reliability suite: launching jobs (locally or from the virtual
cluster's controller namespace), reading the per-rank result files, and the leak checks that
every fault test ends with (no process of the job left, no /dev/shm/perseus-* name left).

Deliberately not a conftest.py: tests/python/conftest.py is imported as the module `conftest`
by the other suites, and a second conftest.py here would replace it in sys.modules.

Which perseus is tested follows tests/python/conftest.py: the installed package, or with
PERSEUS_BUILD_DIR=<cmake build dir with -DPERSEUS_BUILD_PYTHON=ON> the source tree's
python/perseus plus that build's _core (forwarded to every rank, remote ones included)."""

import glob
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
WORKERS = HERE / "workers"
PY = sys.executable

sys.path.insert(0, str(HERE.parent / "multihost"))
if os.environ.get("PERSEUS_BUILD_DIR"):
    sys.path.insert(0, str(REPO / "python"))

# Every fault must surface within PERSEUS_TIMEOUT plus this margin (seconds): detection,
# unwinding the engine and Python's exception path on a loaded 2-core machine.
TIMEOUT_MARGIN_S = 5.0


def job_env(**extra):
    """The environment of a job: ours, the source tree's python/ when testing a build dir,
    short timeouts so that every failure is bounded."""
    env = dict(os.environ)
    if os.environ.get("PERSEUS_BUILD_DIR"):
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO / "python"), env.get("PYTHONPATH")) if p)
    env.setdefault("PERSEUS_TIMEOUT", "5")
    env.setdefault("PERSEUS_START_TIMEOUT", "15")
    env["OMP_NUM_THREADS"] = "1"
    env.update({k: str(v) for k, v in extra.items()})
    return env


class Job:
    """One perseusrun invocation of workers/<worker>. Each gets a unique tag (an argument of
    every rank, so leftover processes can be found by their command line) and a results
    folder (on the shared file system, so remote ranks write there too)."""

    def __init__(self, tmp_path, worker, *args, np=2, hosts=None, extra=(), env=None,
                 cluster=None, timeout=90):
        self.tag = "reltag-" + uuid.uuid4().hex[:10]
        self.results = Path(tmp_path) / self.tag
        self.results.mkdir(parents=True)
        os.chmod(self.results, 0o777)
        self.cluster = cluster
        cmd = [PY, "-m", "perseus.runner", "-np", str(np)]
        if hosts:
            cmd += ["-H", hosts]
        if cluster is not None:
            cmd += cluster.perseusrun_args()
        cmd += [str(a) for a in extra]
        cmd += [PY, str(WORKERS / worker), "--tag", self.tag, "--results", str(self.results)]
        cmd += [str(a) for a in args]
        if cluster is not None:
            cmd = ["ip", "netns", "exec", cluster.names[cluster.controller]] + cmd
        self.cmd = cmd
        self.env = env or job_env()
        self.timeout = timeout
        self.shm_before = shm_names()
        self.proc = None
        self.started = None
        self.ended = None

    def start(self):
        self.started = time.time()
        self.proc = subprocess.Popen(self.cmd, env=self.env, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, cwd=str(REPO))
        return self

    def wait(self):
        try:
            self.stdout, self.stderr = self.proc.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.stdout, self.stderr = self.proc.communicate()
            raise AssertionError("perseusrun did not end within %ds (a hang)\n%s"
                                 % (self.timeout, self.output()))
        self.ended = time.time()
        self.returncode = self.proc.returncode
        return self

    def run(self):
        return self.start().wait()

    def output(self):
        return "exit %s\nstdout:\n%s\nstderr:\n%s" % (
            getattr(self, "returncode", None), getattr(self, "stdout", "")[-5000:],
            getattr(self, "stderr", "")[-8000:])

    def results_by_rank(self):
        """rank -> the last record each rank wrote (workers/common.py report())."""
        out = {}
        for path in self.results.glob("rank*.json"):
            with open(path) as f:
                for line in f:
                    if line.strip():
                        rec = json.loads(line)
                        out.setdefault(rec["rank"], []).append(rec)
        return out

    def marker(self, name):
        p = self.results / name
        return float(p.read_text()) if p.exists() else None

    def wait_marker(self, name, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if (self.results / name).exists():
                return True
            if self.proc.poll() is not None:
                return False
            time.sleep(0.05)
        return False

    def assert_clean(self, grace=15):
        """No process with the job's tag anywhere (local or in any namespace: they share one
        pid space) and no new /dev/shm/perseus-* name, after at most `grace` seconds."""
        deadline = time.time() + grace
        left = tagged_pids(self.tag)
        while left and time.time() < deadline:
            time.sleep(0.1)
            left = tagged_pids(self.tag)
        assert not left, "processes of the job outlived it: %s" % describe_pids(left)
        leaked = leaked_shm(self.shm_before)
        assert not leaked, "shared-memory names left behind: %s" % sorted(leaked)


def tagged_pids(tag):
    me = os.getpid()
    pids = []
    for d in glob.glob("/proc/[0-9]*"):
        try:
            with open(d + "/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        pid = int(d.rsplit("/", 1)[1])
        if tag.encode() in cmd and pid != me:
            # Zombies are already dead: their parent just has not reaped them.
            try:
                with open(d + "/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                        continue
            except OSError:
                continue
            pids.append(pid)
    return pids


def describe_pids(pids):
    out = []
    for pid in pids:
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                out.append("%d: %s" % (pid, f.read().replace(b"\0", b" ")[:200].decode()))
        except OSError:
            pass
    return "; ".join(out)


def shm_names():
    return {n for n in os.listdir("/dev/shm") if n.startswith("perseus-")}


def leaked_shm(before):
    """New perseus-* names that stay for a second. Other jobs on this machine (the team runs
    tests at the same time) create names too, but unlink them within milliseconds of start-up
    (Note [Shared-memory segments]), so a name that persists is a leak."""
    new = shm_names() - before
    if not new:
        return set()
    time.sleep(1.0)
    return new & shm_names()


def kill_tagged(tag):
    """Test clean-up after a failed assertion: never leave our own processes behind."""
    for pid in tagged_pids(tag):
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
