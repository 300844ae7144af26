"""Small to large collectives from Python, every library interleaved in the same processes:
perseus.torch, perseus.mxnet (reported only), mpi4py over Open MPI, and torch.distributed's
Gloo backend; allreduce (in place, float32 sum), broadcast (in place) and allgather, 4 B to
64 MiB per rank, at each rank count given. Writes a markdown table (the command that made it
on top) and the raw samples beside it.

    pip install mpi4py          # the MPI peer; needs Open MPI (scripts/setup.sh installs it)
    python bench/small_ops/run.py --np 2 4 --out bench/results/small_ops.md
    python bench/small_ops/run.py --np 2 --ops allgather --libs mpi4py --sizes 4,64,1024 \
        --out /tmp/allgather.md     # one op against one peer (perseus.torch always runs)

Perseus comes from PERSEUS_BUILD_DIR (a build with -DPERSEUS_BUILD_PYTHON=ON) or the installed
package. Without Open MPI's mpirun the job runs under perseusrun and the mpi4py column is
skipped with a message; without mpi4py, likewise."""

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
LIBS = ("perseus.torch", "perseus.mxnet", "mpi4py", "gloo")
OPS = ("allreduce", "broadcast", "allgather")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--np", type=int, nargs="+", default=[2, 4])
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--sizes", default=None, help="comma-separated bytes per rank")
    p.add_argument("--ops", default=",".join(OPS), help="comma-separated: " + ", ".join(OPS))
    p.add_argument("--libs", default=",".join(LIBS),
                   help="comma-separated: " + ", ".join(LIBS) + " (perseus.torch always runs)")
    p.add_argument("--budget-ms", type=float, default=20.0)
    p.add_argument("--quick", action="store_true", help="3 repetitions, 4 B to 4 MiB")
    p.add_argument("--out", default=str(REPO / "bench" / "results" / "small_ops.md"))
    p.add_argument("--timeout", type=int, default=3600)
    return p.parse_args()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def open_mpi_mpirun():
    """Open MPI's mpirun, or None (MPICH's has no OMPI_* environment for the ranks)."""
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        return None
    version = subprocess.run([mpirun, "--version"], capture_output=True, text=True)
    return mpirun if "Open MPI" in version.stdout + version.stderr else None


def has_mpi4py():
    return subprocess.run([sys.executable, "-c", "import mpi4py"],
                          capture_output=True).returncode == 0


def job_env():
    env = dict(os.environ)
    if env.get("PERSEUS_BUILD_DIR"):  # the source tree's package with that build's _core
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "python"),
                                                        env.get("PYTHONPATH")) if p)
    env["SMALL_OPS_GLOO_INIT"] = "tcp://127.0.0.1:%d" % free_port()
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    # One compute thread per rank, as in the other benches (MXNet's OpenMP workers spin on
    # after each of its ops).
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def launch(np, worker_args, mpirun, timeout):
    """Runs worker.py on np ranks; returns its JSON lines."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "samples.jsonl"
        env = job_env()
        worker = [sys.executable, str(HERE / "worker.py"), "--out", str(out)] + worker_args
        if mpirun:
            # No binding: Perseus's engine thread and the caller share the rank's cores.
            cmd = [mpirun, "-np", str(np), "--bind-to", "none", "--oversubscribe"]
            for var in ("PYTHONPATH", "PERSEUS_BUILD_DIR", "SMALL_OPS_GLOO_INIT"):
                if var in env:
                    cmd += ["-x", var]
            cmd += worker
        else:
            cmd = [sys.executable, "-m", "perseus.runner", "-np", str(np)] + worker
        result = subprocess.run(cmd, env=env, timeout=timeout, capture_output=True, text=True)
        if result.returncode != 0:
            sys.exit("%s failed (%d):\n%s\n%s" % (" ".join(cmd), result.returncode,
                                                  result.stdout[-4000:], result.stderr[-4000:]))
        return [json.loads(line) for line in out.read_text().splitlines()]


def human(nbytes):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return "%d %s" % (nbytes // scale, unit)
    return "%d B" % nbytes


def fmt_us(seconds):
    us = seconds * 1e6
    return "%.2f" % us if us < 10 else "%.1f" % us if us < 1000 else "{:,.0f}".format(us)


def table(records, ranks):
    """One markdown table per op: median per-op µs of each library, and mpi4py over Perseus."""
    lines = []
    libs = [lib for lib in LIBS if any(r.get("lib") == lib for r in records)]
    for op in OPS:
        rows = {(r["lib"], r["bytes"]): r["seconds"] for r in records
                if r.get("op") == op and r.get("ranks") == ranks}
        sizes = sorted({b for (_, b) in rows})
        if not sizes:
            continue
        lines += ["", "**%s, %d ranks** (median µs per op; min–max over repetitions in the raw "
                  "file)" % (op, ranks), ""]
        head = ["size"] + libs + (["mpi4py / perseus.torch"] if "mpi4py" in libs else [])
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for b in sizes:
            med = {lib: statistics.median(rows[(lib, b)]) for lib in libs if (lib, b) in rows}
            cells = [human(b)] + [fmt_us(med[lib]) if lib in med else "–" for lib in libs]
            if "mpi4py" in libs:
                ratio = med.get("mpi4py", 0) / med["perseus.torch"] if "perseus.torch" in med \
                    else 0
                cells.append("%.2f×" % ratio if ratio else "–")
            lines.append("| " + " | ".join(cells) + " |")
    return lines


def main():
    args = parse_args()
    sizes = args.sizes or ("4,64,1024,4096,65536,1048576,4194304" if args.quick else None)
    reps = 3 if args.quick else args.reps
    load_at_start = os.getloadavg()[0]
    mpirun = open_mpi_mpirun()
    unknown = set(args.ops.split(",")) - set(OPS) | set(args.libs.split(",")) - set(LIBS)
    if unknown:
        sys.exit("unknown ops or libs: %s" % ", ".join(sorted(unknown)))
    libs = [lib for lib in LIBS if lib in args.libs.split(",") or lib == "perseus.torch"]
    notes = []
    if mpirun is None and "mpi4py" in libs:
        notes.append("mpi4py skipped: Open MPI's mpirun is not installed (ran under perseusrun)")
        libs.remove("mpi4py")
    elif "mpi4py" in libs and not has_mpi4py():
        notes.append("mpi4py skipped: not installed (pip install mpi4py)")
        libs.remove("mpi4py")
    common = ["--reps", str(reps), "--budget-ms", str(args.budget_ms), "--ops", args.ops] + (
        ["--sizes", sizes] if sizes else [])
    # perseus.mxnet runs in processes of its own: MXNet's engine threads go on working after
    # its ops return, on the cores the next library's ops in the same process would need.
    jobs = [[lib for lib in libs if lib != "perseus.mxnet"]] + (
        [["perseus.mxnet"]] if "perseus.mxnet" in libs else [])
    records = []
    for np in args.np:
        for job in jobs:
            print("running %d ranks: %s..." % (np, ", ".join(job)), flush=True)
            records += launch(np, common + ["--libs", ",".join(job)], mpirun, args.timeout)
    notes += sorted({r["skipped"] for r in records if "skipped" in r})
    for note in notes:
        print(note, file=sys.stderr)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    command = "python bench/small_ops/run.py " + " ".join(sys.argv[1:])
    notes.append("Host: %d cores, load average %.1f when the run started" % (
        os.cpu_count(), load_at_start))
    lines = ["# Small collectives from Python", "",
             "Generated by `%s` (raw samples: `%s`). Per-op time: the slowest rank's time "
             "over k back-to-back ops; median of %d repetitions, every library interleaved in "
             "the same processes but perseus.mxnet, which runs in its own. Allgather sizes are "
             "per rank. %s" % (
                 command.strip(), out.with_suffix(".jsonl").name, reps,
                 " ".join(n + "." for n in notes))]
    for np in args.np:
        lines += table(records, np)
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
