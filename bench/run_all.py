"""Runs the collective benchmarks side by side in one go and writes the figures.

    python bench/run_all.py [--max-mib 256] [--ranks 2] [--quick]

Order of work, all in one run so that ratios compare like with like on this noisy machine:
  1. builds bench binaries (CMake build/release, and mpicc for the Open MPI peer);
  2. sweeps allreduce/allgather/broadcast/reducescatter for Perseus (perseusrun), Open MPI and
     torch.distributed/gloo, then the engine latency and the ResNet-50 model step;
  3. writes bench/results/latest.jsonl, docs/img/*.png and docs/PERFORMANCE.md.
"""
import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, "build", "release")
RESULTS = os.path.join(ROOT, "bench", "results")


def log(msg):
    print(f"[run_all] {msg}", file=sys.stderr, flush=True)


def run_json(cmd, env=None, timeout=3600):
    log(" ".join(cmd))
    full_env = dict(os.environ, **(env or {}))
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=full_env, timeout=timeout)
    rows = []
    for line in proc.stdout.splitlines():
        # perseusrun prefixes lines with "[rank]<stdout>:"; keep the JSON part.
        start = line.find("{")
        if start < 0:
            continue
        try:
            rows.append(json.loads(line[start:]))
        except json.JSONDecodeError:
            pass
    if proc.returncode != 0:
        log(f"exit {proc.returncode}: {proc.stderr[-2000:]}")
    return rows


def build():
    subprocess.run(["cmake", "-S", ROOT, "-B", BUILD, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                    "-DPERSEUS_BUILD_TESTS=OFF"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["ninja", "-C", BUILD, "perseus_collectives_bench"], check=True)
    mpi_bin = os.path.join(BUILD, "mpi_collectives_bench")
    subprocess.run(["mpicc", "-O2", "-o", mpi_bin,
                    os.path.join(ROOT, "bench", "peers", "mpi_collectives_bench.c")], check=True)
    return os.path.join(BUILD, "bench", "perseus_collectives_bench"), mpi_bin


def perseusrun():
    exe = shutil.which("perseusrun")
    return [exe] if exe else [sys.executable, "-m", "perseus.runner"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--max-mib", type=float, default=256)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="3 samples, short sweeps (for a smoke run)")
    ap.add_argument("--skip", default="", help="comma list of: perseus,openmpi,gloo,latency,model")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    env = {"SAMPLES": "3" if args.quick else "11"}
    perseus_bin, mpi_bin = build()
    n = str(args.ranks)
    rows = []
    if "perseus" not in skip:
        rows += run_json(perseusrun() + ["-np", n, perseus_bin, "sweep", str(args.max_mib)], env)
    if "openmpi" not in skip:
        rows += run_json(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", n, mpi_bin,
                          str(args.max_mib)], env)
    if "gloo" not in skip:
        rows += run_json([sys.executable, os.path.join(ROOT, "bench", "peers", "torch_dist_bench.py"),
                          "--ranks", n, "--max-mib", str(args.max_mib)],
                         dict(env, MIN_SAMPLE_S="0.1" if args.quick else "0.25"))
    if "latency" not in skip:
        rows += run_json(perseusrun() + ["-np", n, perseus_bin, "latency"], env)
    if "model" not in skip:
        rows += run_json(perseusrun() + ["-np", n, perseus_bin, "model-step"], env)
    os.makedirs(RESULTS, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y-%m-%dT%H:%M")
    with open(os.path.join(RESULTS, "latest.jsonl"), "w") as f:
        for r in rows:
            r["date"] = stamp
            f.write(json.dumps(r) + "\n")
    cmd = "python bench/run_all.py " + " ".join(sys.argv[1:])
    from report import write_report  # noqa: E402  (bench/report.py)
    write_report(rows, cmd=cmd.strip(), machine=machine_description())
    log("wrote bench/results/latest.jsonl and docs/PERFORMANCE.md")


def machine_description():
    cpu = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{os.cpu_count()} vCPUs ({cpu}), {mem:.0f} GiB RAM, {platform.platform()}"


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main()
