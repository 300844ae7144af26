#!/usr/bin/env python3
"""Start-up under torchrun, repeated: `torchrun --standalone --nproc-per-node 2` of the launcher
tests' worker (tests/python/launchers/topology_worker.py: perseus._core, one allreduce), N
times in a row on this machine. For each start it takes, in seconds:
  total    torchrun started -> the last rank's first allreduce completed;
  perseus  the last rank to have imported perseus -> the last rank's first allreduce
           completed (init(): rank 0 opens the store at MASTER_PORT+1, the others find it,
           then connections and one allreduce).
Reports p50 and p99 of each, the slowest starts, and the starts whose output blamed the
secret ("different PERSEUS_SECRET") although every rank had the same one. The start-up is
even when p99 <= 1.5 x p50 for `perseus`.
Usage: python3 bench/launchers/torchrun_start.py [--starts 30]
(with PERSEUS_BUILD_DIR=build/rel to use a build tree instead of the installed package)"""
import argparse
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [os.path.join(ROOT, "tests", "python"),
                os.path.join(ROOT, "tests", "python", "launchers")]
from launchsupport import TEST_SECRET, WORKER, python_env, results  # noqa: E402


def percentile(values, p):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100.0 * (len(ordered) - 1))))]


def one_start(env):
    started = time.time()
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                        "--nproc-per-node", "2", WORKER], env=env, capture_output=True,
                       text=True, timeout=120)
    out = r.stdout + r.stderr
    res = results(out)
    if r.returncode != 0 or sorted(res) != [0, 1]:
        raise SystemExit("start failed (exit %d):\n%s" % (r.returncode, out[-4000:]))
    return {"total": max(x["first_allreduce"] for x in res.values()) - started,
            "perseus": max(x["first_allreduce"] for x in res.values()) -
                       max(x["imported"] for x in res.values()),
            "blamed_secret": "different PERSEUS_SECRET" in out}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--starts", type=int, default=30)
    args = ap.parse_args()
    env = python_env(PERSEUS_SECRET=TEST_SECRET)
    samples = []
    for i in range(args.starts):
        samples.append(one_start(env))
        print("start %2d: total %.2f s, perseus %.3f s%s" % (
            i + 1, samples[-1]["total"], samples[-1]["perseus"],
            "  (blamed the secret)" if samples[-1]["blamed_secret"] else ""),
              file=sys.stderr, flush=True)
    print("| torchrun --standalone, 2 ranks, %d starts | p50 | p99 | max | p99 / p50 |"
          % len(samples))
    print("|---|---|---|---|---|")
    for key in ("total", "perseus"):
        values = [s[key] for s in samples]
        p50, p99 = statistics.median(values), percentile(values, 99)
        print("| %s | %.3f s | %.3f s | %.3f s | %.2f |" % (key, p50, p99, max(values), p99 / p50))
    print("\nstarts that blamed the secret: %d of %d"
          % (sum(s["blamed_secret"] for s in samples), len(samples)))


if __name__ == "__main__":
    main()
