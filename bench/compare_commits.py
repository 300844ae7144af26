"""Speed of two git revisions side by side: builds each in its own `git worktree` and build
directory, then times, for each, the engine's 4-B allreduce on the negotiated and on the posted
path (bench/engine_latency_bench.cc, 2 forked ranks) and the Python 4-B allreduce
(perseus.torch's allreduce_, through bench/small_ops/worker.py, 2 ranks). The two revisions
run interleaved: every round times every measurement on both, in alternating order, so that
both see the same machine. Writes a markdown table of after/before ratios (the command that
made it on top) and the raw samples beside it (.jsonl).

    python3 bench/compare_commits.py                       # main's merge-base vs HEAD
    python3 bench/compare_commits.py --before v1 --after v2 --rounds 7 --out report.md

The worktrees and builds live under --workdir (kept between runs: a second run rebuilds only
what changed; ccache is used when present)."""

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
MEASUREMENTS = (
    ("engine, negotiated", "engine_negotiated"),
    ("engine, posted", "engine_posted"),
    ("Python allreduce_", "python"),
    ("ResNet-50 step (C API)", "resnet50"),
)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", default=None, help="revision (default: merge-base of main and HEAD)")
    p.add_argument("--after", default="HEAD")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--iterations", type=int, default=20000,
                   help="ops per engine_latency_bench run")
    p.add_argument("--python-reps", type=int, default=5, help="samples per Python run")
    p.add_argument("--workdir", default=str(REPO / "build" / "compare_commits"))
    p.add_argument("--out", default=str(REPO / "bench" / "results" / "compare_commits.md"))
    p.add_argument("--timeout", type=int, default=600, help="seconds per measurement")
    return p.parse_args()


def git(*args, cwd=REPO):
    return subprocess.run(["git"] + list(args), cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


def log(msg):
    print("[compare_commits] " + msg, file=sys.stderr, flush=True)


class Revision:
    """One revision: its worktree, its build, and how to run its benchmarks."""

    def __init__(self, label, rev, workdir):
        self.label = label
        self.sha = git("rev-parse", rev + "^{commit}")
        self.subject = git("log", "-1", "--format=%s", self.sha)
        self.tree = Path(workdir) / label
        self.build_dir = self.tree / "build" / "rel"

    def checkout(self):
        if self.tree.exists():
            git("checkout", "--quiet", "--detach", self.sha, cwd=self.tree)
        else:
            self.tree.parent.mkdir(parents=True, exist_ok=True)
            git("worktree", "add", "--detach", str(self.tree), self.sha)

    def build(self):
        cmd = ["cmake", "-S", str(self.tree), "-B", str(self.build_dir), "-G", "Ninja",
               "-DCMAKE_BUILD_TYPE=RelWithDebInfo", "-DPERSEUS_BUILD_PYTHON=ON",
               "-DPERSEUS_WITH_CUDA=OFF", "-DPERSEUS_BUILD_BENCH=ON",
               "-DPERSEUS_BUILD_TESTS=OFF", "-DPython_EXECUTABLE=" + sys.executable]
        if shutil.which("ccache"):
            cmd.append("-DCMAKE_CXX_COMPILER_LAUNCHER=ccache")
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["nice", "ninja", "-C", str(self.build_dir), "-j2",
                        "engine_latency_bench", "perseus_collectives_bench", "_core"], check=True,
                       stdout=subprocess.DEVNULL)

    def python_env(self):
        """This revision's package and extension, as perseusrun and the Python bench see them."""
        return dict(os.environ, PERSEUS_BUILD_DIR=str(self.build_dir),
                    PYTHONPATH=os.pathsep.join(p for p in (str(self.tree / "python"),
                                                           os.environ.get("PYTHONPATH")) if p))

    def resnet50_us(self, timeout):
        """perseus_collectives_bench model-step under this revision's perseusrun at 2 ranks: one
        ResNet-50 gradient step (161 allreduces, submitted then waited), the median sample."""
        exe = self.build_dir / "bench" / "perseus_collectives_bench"
        cmd = [sys.executable, "-m", "perseus.runner", "-np", "2", str(exe), "model-step"]
        proc = subprocess.run(cmd, env=self.python_env(), timeout=timeout, capture_output=True,
                              text=True)
        found = [json.loads(line[line.index("{"):]) for line in proc.stdout.splitlines()
                 if '"resnet50-step"' in line]
        if proc.returncode != 0 or not found:
            raise RuntimeError("%s: exit %d\n%s%s" % (" ".join(cmd), proc.returncode,
                                                      proc.stdout[-2000:], proc.stderr[-2000:]))
        return found[0]["time_us"]

    def engine_us(self, posted, iterations, timeout):
        """engine_latency_bench's per-op median (µs), the slower of the two ranks."""
        env = dict(os.environ, PERSEUS_POSTED_ALLREDUCE="1" if posted else "0")
        exe = self.build_dir / "bench" / "engine_latency_bench"
        proc = subprocess.run([str(exe), "2", str(iterations), "4"], env=env, timeout=timeout,
                              capture_output=True, text=True)
        found = [float(m.group(1)) for m in
                 map(re.compile(r"median ([0-9.]+) us/op").search, proc.stdout.splitlines()) if m]
        if proc.returncode != 0 or len(found) != 2:
            raise RuntimeError("%s: exit %d\n%s%s" % (exe, proc.returncode, proc.stdout,
                                                      proc.stderr[-2000:]))
        return max(found)

    def python_us(self, reps, timeout):
        """perseus.torch's 4-B allreduce_ (µs per op, median of the samples; each sample is the
        slower rank's time over back-to-back ops), with this revision's package and build."""
        sys.path.insert(0, str(HERE / "small_ops"))
        import run as small_ops  # noqa: E402  (bench/small_ops/run.py: the launcher)
        sys.path.pop(0)
        env = dict(self.python_env(),
                   SMALL_OPS_GLOO_INIT="tcp://127.0.0.1:%d" % free_port(),
                   OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        mpirun = small_ops.open_mpi_mpirun()
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "samples.jsonl"
            worker = [sys.executable, str(HERE / "small_ops" / "worker.py"), "--out", str(out),
                      "--libs", "perseus.torch", "--sizes", "4", "--reps", str(reps)]
            if mpirun:
                cmd = [mpirun, "-np", "2", "--bind-to", "none", "--oversubscribe"]
                for var in ("PYTHONPATH", "PERSEUS_BUILD_DIR", "SMALL_OPS_GLOO_INIT"):
                    cmd += ["-x", var]
            else:
                cmd = [sys.executable, "-m", "perseus.runner", "-np", "2"]
            proc = subprocess.run(cmd + worker, env=env, timeout=timeout, capture_output=True,
                                  text=True)
            if proc.returncode != 0 or not out.exists():
                raise RuntimeError("%s: exit %d\n%s%s" % (" ".join(cmd + worker), proc.returncode,
                                                          proc.stdout[-2000:], proc.stderr[-2000:]))
            rows = [json.loads(line) for line in out.read_text().splitlines()]
        seconds = next(r["seconds"] for r in rows
                       if r.get("lib") == "perseus.torch" and r.get("op") == "allreduce")
        return statistics.median(seconds) * 1e6


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(rev, key, args):
    if key == "python":
        return rev.python_us(args.python_reps, args.timeout)
    if key == "resnet50":
        return rev.resnet50_us(args.timeout)
    return rev.engine_us(key == "engine_posted", args.iterations, args.timeout)


def report(args, revs, samples, load):
    before, after = revs
    lines = ["# Two revisions compared", "",
             "Generated by `python3 bench/compare_commits.py %s` (do not edit by hand)." %
             " ".join(sys.argv[1:]), "",
             "- before: `%s` %s" % (before.sha[:12], before.subject),
             "- after: `%s` %s" % (after.sha[:12], after.subject),
             "- %d rounds; each round times every measurement on both revisions, in alternating "
             "order (interleaved, so that a busy machine slows both alike); %d cores, load "
             "average %.1f at the start and %.1f at the end." % (args.rounds, os.cpu_count(),
                                                                 load[0], load[1]),
             "- engine: `engine_latency_bench 2 %d 4` (2 forked ranks, perseus_allreduce + "
             "perseus_wait of 4 B; the slower rank's median per op), negotiated with "
             "PERSEUS_POSTED_ALLREDUCE=0; Python: bench/small_ops/worker.py's perseus.torch "
             "allreduce_ of 4 B on 2 ranks (median of %d samples per run); ResNet-50 step: "
             "`perseusrun -np 2 perseus_collectives_bench model-step` (ResNet-50's 161 "
             "gradients, fp32, allreduced and waited for; the median of 11 steps)." %
             (args.iterations, args.python_reps),
             "- after / before: of the medians over rounds (below 1: after is faster); per round: "
             "the median of each round's ratio, and the range of those ratios (min–max). A "
             "round that a busy machine slowed shows as an outlier in the range; the median "
             "per-round ratio is the figure to read.", "",
             "| measurement | before (µs) | after (µs) | after / before | per round: median "
             "| per round: range |",
             "|---|---|---|---|---|---|"]
    for title, key in MEASUREMENTS:
        b = [s[before.label] for s in samples[key]]
        a = [s[after.label] for s in samples[key]]
        per_round = [x / y for x, y in zip(a, b)]
        lines.append("| %s | %.2f | %.2f | %.3f× | %.3f× | %.3f–%.3f |" % (
            title, statistics.median(b), statistics.median(a),
            statistics.median(a) / statistics.median(b), statistics.median(per_round),
            min(per_round), max(per_round)))
    return "\n".join(lines) + "\n"


def main():
    args = parse_args()
    before_rev = args.before or git("merge-base", "main", "HEAD")
    revs = [Revision("before", before_rev, args.workdir), Revision("after", args.after,
                                                                   args.workdir)]
    for rev in revs:
        log("building %s (%s) in %s" % (rev.label, rev.sha[:12], rev.build_dir))
        rev.checkout()
        rev.build()
    load_start = os.getloadavg()[0]
    samples = {key: [] for _, key in MEASUREMENTS}
    raw = []
    for rnd in range(args.rounds):
        order = revs if rnd % 2 == 0 else revs[::-1]
        for title, key in MEASUREMENTS:
            row = {}
            for rev in order:
                row[rev.label] = measure(rev, key, args)
                raw.append({"round": rnd, "measurement": key, "revision": rev.label,
                            "sha": rev.sha, "us": row[rev.label], "time": time.time()})
            samples[key].append(row)
            log("round %d %s: %s" % (rnd, title, ", ".join(
                "%s %.2f us" % (label, us) for label, us in row.items())))
    text = report(args, revs, samples, (load_start, os.getloadavg()[0]))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    out.with_suffix(".jsonl").write_text("".join(json.dumps(r) + "\n" for r in raw))
    print(text)


if __name__ == "__main__":
    main()
