"""Runs every benchmark side by side in one go and writes the figures.

    python bench/run_all.py [--quick] [--max-mib 256] [--ranks 2] [--skip stage,...]

All in one run, so that ratios compare like with like on this noisy machine:
  1. builds the Perseus benchmarks and Python extension (CMake Release in --build-dir,
     build/bench by default: a tree of its own, so build/release keeps its tests) and the
     Open MPI peer (mpicc); where Horovod does not import, builds and installs it
     (bench/peers/build_horovod.sh: about 30 minutes on 2 cores the first time, a cached wheel
     after that; --no-install-peers leaves it out);
  2. collectives: allreduce/allgather/broadcast/reducescatter sweeps, 4 B to --max-mib, for
     Perseus (C API, perseusrun), Open MPI, torch.distributed/Gloo and Horovod (horovodrun
     --gloo, Python API; allreduce also with horovodrun --mpi where the wheel has MPI), plus
     Perseus through the same Python script as Horovod (allreduce); the allreduce of Perseus's
     C API and of Open MPI runs in ALLREDUCE_ROUNDS alternating sweeps, median per size;
  3. latency: 4-byte allreduce through the asynchronous engine, C API (Perseus) and Python
     allreduce_async_ + synchronize (Perseus, Horovod); ResNet-50 gradient step (C API);
  4. negotiation: step cost with 1/10/100/1000 small tensors (Perseus, Horovod);
  5. training: throughput at 1 and --ranks ranks, the same model and data: PyTorch (Perseus
     DistributedOptimizer, Horovod, DDP/Gloo) and MXNet (Perseus DistributedTrainer, Perseus
     KVStore, Horovod, MXNet dist_sync parameter servers);
  6. writes bench/results/latest.jsonl, docs/img/*.png and the sections of docs/PERFORMANCE.md.
A peer that cannot run (Horovod not installed, a launch failing) is recorded as a skipped row
with its reason, shown in the report; the rest goes on.

Stages for --skip: perseus, openmpi, gloo, horovod, latency, model, negotiation, train-torch,
train-mxnet (horovod drops every Horovod figure).
"""
import argparse
import datetime
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "bench", "results")
PEERS_DIR = os.path.join(ROOT, "bench", "peers")
TRAIN_DIR = os.path.join(ROOT, "bench", "training")


ALLREDUCE_ROUNDS = 5  # alternating Perseus / Open MPI allreduce sweeps (median per size): with
# 3, two slow rounds of one library (cores placed apart for a while) decided its median
TRAIN_ROUNDS = 3  # interleaved training runs per framework and rank count (median per library)


def log(msg):
    print(f"[run_all] {msg}", file=sys.stderr, flush=True)


class Runner:
    """Runs producers and collects their JSON lines; a failing producer becomes a 'skipped' row
    naming the cause, so one broken peer does not cost the whole run."""

    def __init__(self, build_dir, ranks):
        self.rows = []
        self.build_dir = build_dir
        self.ranks = ranks
        # perseus.* from the source tree with this build's _core (python/perseus/__init__.py).
        self.py_env = {"PERSEUS_BUILD_DIR": build_dir,
                       "PYTHONPATH": os.pathsep.join(
                           p for p in (os.path.join(ROOT, "python"), os.environ.get("PYTHONPATH"))
                           if p)}

    def run(self, what, library, cmd, env=None, timeout=1800, expect=1, keep=True):
        log(f"{what}: " + " ".join(cmd))
        full_env = dict(os.environ, **self.py_env, **(env or {}))
        t0 = time.time()
        try:
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=full_env, timeout=timeout)
            out, err, rc = proc.stdout, proc.stderr, proc.returncode
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            err, rc = f"timed out after {timeout} s", 124
        except OSError as e:
            out, err, rc = "", str(e), 127
        rows = parse_rows(out)
        log(f"{what}: {len(rows)} rows in {time.time() - t0:.0f} s, exit {rc}")
        if rc != 0 or len(rows) < expect:
            reason = last_lines(err) or f"exit {rc}, {len(rows)} rows"
            log(f"{what} failed: {reason}")
            self.skip(what, library, f"exit {rc}: {reason}")
        if keep:
            self.rows += rows
        return rows

    def skip(self, what, library, reason):
        what = re.sub(r", round \d+$", "", what)
        if any(row.get("collective") == "skipped" and row.get("what") == what
               for row in self.rows):
            return  # one row per failing run, not per round
        self.rows.append({"library": library, "collective": "skipped", "what": what,
                          "ranks": self.ranks, "reason": reason})


def median_rows(rounds, key=("library", "collective", "bytes"), value="time_us"):
    """One row per `key` from several rounds of the same runs: the row whose `value` is the
    median of the rounds (its other figures measured with it), the rounds' values kept in
    `rounds` + the value's name."""
    groups = {}
    for rows in rounds:
        for row in rows:
            groups.setdefault(tuple(row.get(k) for k in key), []).append(row)
    out = []
    for rows in groups.values():
        values = sorted(r[value] for r in rows)
        mid = values[len(values) // 2]
        row = dict(next(r for r in rows if r[value] == mid))
        row["rounds_" + value] = [r[value] for r in rows]
        out.append(row)
    return out


def interleaved(r, runs, count, after_round=None):
    """Runs `runs` (what, library, cmd, run() keywords) in `count` rounds, rotating their order
    from round to round so that no library always goes first; returns the rounds' rows.
    after_round(rounds so far), if given, runs after each round (a report of what is done)."""
    rounds = []
    for i in range(count):
        k = i % len(runs) if runs else 0
        rows = []
        for what, library, cmd, kw in runs[k:] + runs[:k]:
            rows += r.run(f"{what}, round {i + 1}" if count > 1 else what, library, cmd,
                          keep=False, **kw)
        rounds.append(rows)
        if after_round is not None:
            after_round(rounds)
    return rounds


def parse_rows(stdout):
    rows = []
    for line in stdout.splitlines():
        # Launchers prefix lines ("[1,0]<stdout>:", "[0]<stdout>:"); keep the JSON part.
        start = line.find("{")
        if start < 0:
            continue
        try:
            row = json.loads(line[start:])
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and "library" in row:
            rows.append(row)
    return rows


def last_lines(text, n=3):
    lines = [l.strip() for l in text.strip().splitlines() if l.strip()]
    return " | ".join(lines[-n:])[-600:]


def build(build_dir):
    subprocess.run(["cmake", "-S", ROOT, "-B", build_dir, "-G", "Ninja",
                    "-DCMAKE_BUILD_TYPE=Release", "-DPERSEUS_BUILD_TESTS=OFF",
                    "-DPERSEUS_BUILD_PYTHON=ON"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["ninja", "-C", build_dir, "-j2", "perseus_collectives_bench",
                    "engine_latency_bench", "floor_probe_bench", "_core"], check=True)
    mpi_bin = os.path.join(build_dir, "mpi_collectives_bench")
    subprocess.run(["mpicc", "-O2", "-o", mpi_bin,
                    os.path.join(PEERS_DIR, "mpi_collectives_bench.c")], check=True)
    return os.path.join(build_dir, "bench", "perseus_collectives_bench"), mpi_bin


def engine_latency_row(build_dir, ranks, iterations):
    """engine_latency_bench (forks its ranks; perseus_allreduce + perseus_wait, the path the
    framework layers take) as a JSON row: the max over ranks of the per-rank medians."""
    exe = os.path.join(build_dir, "bench", "engine_latency_bench")
    cmd = [exe, str(ranks), str(iterations), "4"]
    log("perseus C API latency (wait): " + " ".join(cmd))
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        return None, "timed out after 600 s"
    pat = re.compile(r"median ([0-9.]+) us/op \(p10 ([0-9.]+), p90 ([0-9.]+), mean ([0-9.]+)\)")
    found = [m for m in map(pat.search, proc.stdout.splitlines()) if m]
    if proc.returncode != 0 or len(found) != ranks:
        return None, f"exit {proc.returncode}: {last_lines(proc.stderr) or proc.stdout[-300:]}"
    return {"library": "perseus", "collective": "allreduce-latency-wait", "ranks": ranks,
            "bytes": 4, "time_us": max(float(m.group(1)) for m in found),
            "p90_us": max(float(m.group(3)) for m in found),
            "mean_us": max(float(m.group(4)) for m in found), "iters": iterations}, None


def latency_split_row(build_dir, ranks, iterations):
    """The same 4-byte loop with PERSEUS_TIMELINE on: the medians of the engine's own spans
    (NEGOTIATE: submission to negotiated, QUEUE, COMMUNICATE: the collective) against the
    per-op time, so the shortfall text can say where a small op's time goes. The timeline adds
    its own cost, so the total is taken from this run too."""
    import glob
    import statistics
    import tempfile
    exe = os.path.join(build_dir, "bench", "engine_latency_bench")
    tmp = tempfile.mkdtemp(prefix="perseus-tl-")
    env = dict(os.environ, PERSEUS_TIMELINE=os.path.join(tmp, "tl.json"))
    log("perseus C API latency split (timeline): " + exe)
    try:
        proc = subprocess.run([exe, str(ranks), str(iterations), "4"], capture_output=True,
                              text=True, timeout=300, env=env)
        pat = re.compile(r"median ([0-9.]+) us/op")
        totals = [float(m.group(1)) for m in map(pat.search, proc.stdout.splitlines()) if m]
        spans = {}
        for path in glob.glob(os.path.join(tmp, "tl.*json")):
            text = open(path).read().rstrip().rstrip(",")
            events = json.loads(text if text.endswith("]") else text + "]")
            for e in events:
                if e.get("ph") == "X":
                    spans.setdefault(e["name"], []).append(e["dur"])
    except (subprocess.TimeoutExpired, ValueError, OSError) as e:
        return None, f"{type(e).__name__}: {e}"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if proc.returncode != 0 or not totals or "COMMUNICATE" not in spans:
        return None, f"exit {proc.returncode}: {last_lines(proc.stderr)}"
    row = {"library": "perseus", "collective": "latency-split", "ranks": ranks, "bytes": 4,
           "time_us": max(totals)}
    for name, key in (("NEGOTIATE", "negotiate_us"), ("QUEUE", "queue_us"),
                      ("COMMUNICATE", "communicate_us")):
        if name in spans:
            row[key] = statistics.median(spans[name])
    return row, None


def perseusrun(n):
    exe = shutil.which("perseusrun")
    return ([exe] if exe else [sys.executable, "-m", "perseus.runner"]) + ["-np", str(n)]


def horovod_status():
    """(horovodrun command prefix or None, reason). Horovod is probed in a child process: a
    failing import must not touch this one."""
    probe = subprocess.run([sys.executable, "-c",
                            "import horovod.torch, horovod; print(horovod.__version__)"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        return None, "import horovod.torch failed: " + last_lines(probe.stderr, 1)
    exe = shutil.which("horovodrun")
    if not exe:
        return None, f"horovod {probe.stdout.strip()} imports but horovodrun is not on PATH"
    return exe, probe.stdout.strip()


def install_horovod():
    """Builds Horovod 0.28.1 (or installs its cached wheel) when it does not import, so that a
    fresh clone's first run compares against it too. A failed build leaves Horovod's rows
    skipped, with horovod_status()'s reason."""
    if horovod_status()[0] is not None:
        return
    log("horovod: not importable; building it with bench/peers/build_horovod.sh")
    proc = subprocess.run(["bash", os.path.join(PEERS_DIR, "build_horovod.sh")],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        log(f"horovod: the build failed (exit {proc.returncode}): "
            f"{last_lines(proc.stderr or proc.stdout)}")


def horovod_mxnet_status():
    """(True, "") when horovod.mxnet imports (the wheel may be built without MXNet)."""
    probe = subprocess.run([sys.executable, "-c", "import horovod.mxnet"],
                           capture_output=True, text=True)
    return probe.returncode == 0, "import horovod.mxnet failed: " + last_lines(probe.stderr, 1)


def horovod_mpi_built():
    probe = subprocess.run([sys.executable, "-c",
                            "import horovod.torch as h; print(int(h.mpi_built()))"],
                           capture_output=True, text=True)
    return probe.returncode == 0 and probe.stdout.strip() == "1"


def horovodrun(prefix, n, controller="gloo"):
    return [prefix, f"--{controller}", "-np", str(n), "-H", f"localhost:{n}"]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--max-mib", type=float, default=None,
                    help="largest size (256; 1 with --quick)")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="few samples, short sweeps (smoke run)")
    ap.add_argument("--skip", default="", help="comma list of stages (see above)")
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build", "bench"))
    ap.add_argument("--no-install-peers", action="store_true",
                    help="do not build Horovod where it does not import (its rows are skipped)")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    max_mib = str(args.max_mib if args.max_mib is not None else (1 if args.quick else 256))
    q = args.quick
    env = {"SAMPLES": "3" if q else "11"}
    perseus_bin, mpi_bin = build(os.path.abspath(args.build_dir))
    n = args.ranks
    r = Runner(os.path.abspath(args.build_dir), n)
    py = sys.executable
    if "horovod" not in skip and not args.no_install_peers:
        install_horovod()
    hvd_run, hvd_info = (None, "skipped by --skip") if "horovod" in skip else horovod_status()
    log(f"horovod: {hvd_info}")
    hvd_mx_ok, hvd_mx_info = horovod_mxnet_status() if hvd_run else (False, hvd_info)
    started = time.time()

    # 2. collectives
    if "perseus" not in skip:
        # The machine's floors for 2 ranks, right before the sweep that is judged against them.
        r.run("floors (memcpy, cross-core)", "floor",
              [os.path.join(r.build_dir, "bench", "floor_probe_bench"), max_mib], env)
        r.run("perseus sweep", "perseus",
              perseusrun(n) + [perseus_bin, "sweep", max_mib, "allgather,broadcast,reducescatter"], env)
        r.run("perseus-py sweep", "perseus-py",
              perseusrun(n) + [py, os.path.join(PEERS_DIR, "hvd_collectives_bench.py"),
                               "--library", "perseus", "--label", "perseus-py",
                               "--collective", "allreduce", "--max-mib", max_mib],
              dict(env, MIN_SAMPLE_S="0.02" if q else "0.1"))
    if "openmpi" not in skip:
        r.run("openmpi sweep", "openmpi", ["mpirun", "--allow-run-as-root", "--oversubscribe",
                                           "-np", str(n), mpi_bin, max_mib,
                                           "allgather,broadcast,reducescatter"], env)
    # The allreduce of Perseus's C API and of Open MPI, in alternating rounds: on a virtual
    # machine the cross-core rate changes for seconds at a time with where the host puts the
    # cores, and one sweep each would compare the two under different placements. Each size's
    # figure is the median of the rounds.
    runs = []
    if "perseus" not in skip:
        runs.append(("perseus allreduce sweep", "perseus",
                     perseusrun(n) + [perseus_bin, "sweep", max_mib, "allreduce"], {"env": env}))
    if "openmpi" not in skip:
        runs.append(("openmpi allreduce sweep", "openmpi",
                     ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(n), mpi_bin,
                      max_mib, "allreduce"], {"env": env}))
    r.rows += median_rows(interleaved(r, runs, 1 if q else ALLREDUCE_ROUNDS))
    if "gloo" not in skip:
        r.run("gloo sweep", "torch-gloo",
              [py, os.path.join(PEERS_DIR, "torch_dist_bench.py"), "--ranks", str(n),
               "--max-mib", max_mib], dict(env, MIN_SAMPLE_S="0.05" if q else "0.25"))
    if hvd_run:
        r.run("horovod sweep", "horovod",
              horovodrun(hvd_run, n) + [py, os.path.join(PEERS_DIR, "hvd_collectives_bench.py"),
                                        "--library", "horovod", "--max-mib", max_mib],
              dict(env, MIN_SAMPLE_S="0.02" if q else "0.1"))
        # Horovod over Open MPI (CPU ops through MPI's shared memory), where the wheel has it:
        # its fastest CPU data path here, so the allreduce comparison is with Horovod's best.
        if horovod_mpi_built():
            r.run("horovod-mpi sweep", "horovod-mpi",
                  horovodrun(hvd_run, n, "mpi") + [
                      py, os.path.join(PEERS_DIR, "hvd_collectives_bench.py"), "--library",
                      "horovod", "--label", "horovod-mpi", "--collective", "allreduce",
                      "--max-mib", max_mib], dict(env, MIN_SAMPLE_S="0.02" if q else "0.1"))
    else:
        r.skip("horovod sweep", "horovod", hvd_info)

    # 3. latency through the asynchronous path, 4. negotiation
    async_env = {"BENCH_SECONDS": "0.5" if q else "3"}
    async_script = os.path.join(PEERS_DIR, "hvd_async_bench.py")
    if "latency" not in skip:
        row, why = engine_latency_row(r.build_dir, n, 2000 if q else 20000)
        if row:
            r.rows.append(row)
        else:
            r.skip("perseus C API latency (wait)", "perseus", why)
        row, why = latency_split_row(r.build_dir, n, 500 if q else 3000)
        if row:
            r.rows.append(row)
        else:
            r.skip("perseus C API latency split (timeline)", "perseus", why)
        r.run("perseus C API latency (poll loop)", "perseus",
              perseusrun(n) + [perseus_bin, "latency"],
              dict(env, LATENCY_ITERS="500" if q else "2000"))  # ~10 ms per op when spinning
    modes = [m for m in ("latency", "negotiation") if m not in skip]
    if modes:
        mode = modes[0] if len(modes) == 1 else "all"
        if "perseus" not in skip:
            r.run(f"perseus async {mode}", "perseus",
                  perseusrun(n) + [py, async_script, mode, "--library", "perseus"], async_env)
        if hvd_run:
            r.run(f"horovod async {mode}", "horovod",
                  horovodrun(hvd_run, n) + [py, async_script, mode, "--library", "horovod"],
                  async_env)
        else:
            r.skip(f"horovod async {mode}", "horovod", hvd_info)
    if "model" not in skip:
        r.run("perseus resnet50 step", "perseus", perseusrun(n) + [perseus_bin, "model-step"], env)

    # 5. training, 1 rank and n ranks. Every library of a framework and rank count runs in
    # TRAIN_ROUNDS interleaved rounds (median step per library): single runs differ by 10-15%
    # on a shared 2-core machine from one minute to the next, as much as the libraries differ.
    steps = ["--steps", "3", "--iters", "2", "--warmup", "2"] if q else \
        ["--steps", "10", "--iters", "5", "--warmup", "5"]
    train_key = ("library", "framework", "ranks")
    for ranks in sorted({1, n}):
        if "train-torch" not in skip:
            script = [py, os.path.join(TRAIN_DIR, "torch_train_bench.py")] + steps
            runs = []
            if ranks == 1:  # the compute-only step, no library: the reference
                runs.append(("torch none x1", "none", script + ["--library", "none"], {}))
            runs.append((f"torch perseus x{ranks}", "perseus",
                         perseusrun(ranks) + script + ["--library", "perseus"], {}))
            if hvd_run:
                runs.append((f"torch horovod x{ranks}", "horovod",
                             horovodrun(hvd_run, ranks) + script + ["--library", "horovod"], {}))
            else:
                r.skip(f"torch horovod x{ranks}", "horovod", hvd_info)
            runs.append((f"torch ddp x{ranks}", "ddp",
                         script + ["--library", "ddp", "--ranks", str(ranks)], {}))
            r.rows += median_rows(interleaved(r, runs, 1 if q else TRAIN_ROUNDS), train_key,
                                  "step_ms")
        if "train-mxnet" not in skip:
            script = [py, os.path.join(TRAIN_DIR, "mxnet_train_bench.py")] + steps
            runs = []
            if ranks == 1:
                runs.append(("mxnet none x1", "none", script + ["--library", "none"], {}))
            for lib in ("perseus-trainer", "perseus-kvstore"):
                runs.append((f"mxnet {lib} x{ranks}", lib,
                             perseusrun(ranks) + script + ["--library", lib], {}))
            if hvd_mx_ok:
                runs.append((f"mxnet horovod x{ranks}", "horovod",
                             horovodrun(hvd_run, ranks) + script + ["--library", "horovod"], {}))
            else:
                r.skip(f"mxnet horovod x{ranks}", "horovod", hvd_mx_info)
            runs.append((f"mxnet mxnet-ps x{ranks}", "mxnet-ps",
                         script + ["--library", "mxnet-ps", "--ranks", str(ranks)],
                         {"timeout": 120}))  # ps-lite can hang when a node dies (4 s normally)
            r.rows += median_rows(interleaved(r, runs, 1 if q else TRAIN_ROUNDS), train_key,
                                  "step_ms")
    log(f"measured in {time.time() - started:.0f} s")

    rows = r.rows
    os.makedirs(RESULTS, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y-%m-%dT%H:%M")
    with open(os.path.join(RESULTS, "latest.jsonl"), "w") as f:
        for row in rows:
            row["date"] = stamp
            f.write(json.dumps(row) + "\n")
    cmd = "python bench/run_all.py " + " ".join(sys.argv[1:])
    from report import write_report  # noqa: E402  (bench/report.py)
    write_report(rows, cmd=cmd.strip(), machine=machine_description(),
                 horovod=hvd_info)
    log("wrote bench/results/latest.jsonl, docs/img/*.png and docs/PERFORMANCE.md")


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
