"""The torch.distributed backend "perseus" against Gloo, side by side in one run, and the report.

    python bench/torch_distributed/run.py [--rounds 3] [--fsdp-ranks 2,4] [--quick]
                                          [--skip ddp,fsdp] [--build-dir build/rel]
                                          [--bind-to core|none] [--out torch_distributed]

Runs the source tree with --build-dir's extension, or the installed package where that
directory does not exist.

  - ddp:  DDP training samples/s at --ranks ranks on bench/training's model (ddp.py), and the
          Horovod API's DistributedOptimizer on the same model and steps (row hvd);
  - fsdp: FSDP2 step time on a 50M-parameter MLP at each of --fsdp-ranks (fsdp.py).
Both also run on the "local" backend (local_backend.py), which communicates nothing: the floor
that no backend can beat, measured in the same run, so that each bar reads against what is
reachable.
Each bench runs its backends in --rounds interleaved rounds, the order rotating from round to
round, and keeps the median round per backend: on a shared machine single runs differ by as
much as the backends do. Writes bench/results/OUT.jsonl and bench/results/OUT.md (make_report.py,
which names this command); a run that skips a bench or changes the setting names its own OUT, so
that the full report stays whole.
"""
import argparse
import datetime
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from run_all import RESULTS, ROOT, Runner, interleaved, machine_description, median_rows  # noqa
from make_report import write_report  # noqa: E402

# "local" is the floor: the same step with no communication (local_backend.py).
BACKENDS = ("perseus", "gloo", "local")


def bench_runs(script, ranks, extra, label, bind_to):
    return [("%s %s x%d" % (label, b, ranks), b,
             [sys.executable, os.path.join(HERE, script), "--backend", b, "--ranks", str(ranks),
              "--bind-to", bind_to] + extra, {"timeout": 1200}) for b in BACKENDS]


def hvd_run(ranks, extra, bind_to):
    """The Horovod API's DistributedOptimizer on DDP's model and steps (bench/training), the
    figure the backend is held to not give away; perseusrun places its ranks as --bind-to
    places the others."""
    script = os.path.join(os.path.dirname(HERE), "training", "torch_train_bench.py")
    return ("ddp hvd x%d" % ranks, "hvd",
            [sys.executable, "-m", "perseus.runner", "-np", str(ranks), "--bind-to", bind_to,
             sys.executable, script, "--library", "perseus", "--label", "hvd"] + extra,
            {"timeout": 1200})


def keep_round_faults(rows, rounds, key):
    """Puts each round's page faults per step beside its step time (rounds_faults_per_step, in
    the order of rounds_step_ms): a round's time is read with its faults (page_faults.py)."""
    for row in rows:
        mine = tuple(row.get(k) for k in key)
        row["rounds_faults_per_step"] = [r.get("faults_per_step") for rs in rounds for r in rs
                                         if tuple(r.get(k) for k in key) == mine]
    return rows


# glibc's heap thresholds, when the caller fixed them for every rank (page_faults.py).
HEAP_ENV = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")


def as_ddp_rows(rounds):
    for rows in rounds:
        for row in rows:
            row.setdefault("bench", "ddp")
    return rounds


def publish(rows, r, args, load_before):
    """Writes the report of the rows so far; returns the report's path."""
    rows = rows + [row for row in r.rows if row.get("collective") == "skipped"]
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ")
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, args.out + ".jsonl"), "w") as f:
        for row in rows:
            f.write(json.dumps(dict(row, date=stamp)) + "\n")
    cmd = " ".join(["python", "bench/torch_distributed/run.py"] + sys.argv[1:])
    # Other processes on the machine move these figures more than anything measured here.
    machine = "%s, 1-min load average %.1f before and %.1f after" % (
        machine_description(), load_before, os.getloadavg()[0])
    machine += "; ranks bound to cores" if args.bind_to == "core" else "; ranks not bound"
    heap = ["%s=%s" % (k, os.environ[k]) for k in HEAP_ENV if k in os.environ]
    if heap:
        machine += "; glibc heap thresholds fixed for every rank (%s)" % ", ".join(heap)
    return write_report(rows, cmd, machine, stamp, os.path.join(RESULTS, args.out + ".md"))


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--ranks", type=int, default=2, help="DDP ranks")
    p.add_argument("--fsdp-ranks", default="2", help="comma-separated, e.g. 2,4")
    p.add_argument("--quick", action="store_true", help="short windows: checks the tooling")
    p.add_argument("--skip", default="", help="ddp,fsdp")
    p.add_argument("--build-dir", default=os.path.join(ROOT, "build", "rel"))
    p.add_argument("--bind-to", choices=("core", "none"), default="core",
                   help="every rank of every backend on its own share of the cores (core, as "
                        "perseusrun does), or where the scheduler puts it (placement.py)")
    p.add_argument("--out", default="torch_distributed",
                   help="the report's name under bench/results/ (.md and .jsonl)")
    args = p.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    load_before = os.getloadavg()[0]
    r = Runner(os.path.abspath(args.build_dir), args.ranks)
    if not os.path.isdir(args.build_dir):
        r.py_env = {}  # no build tree here: the installed package (pip install .)
    rows = []  # the benches done
    key = ("bench", "library", "ranks")

    def bench_rows(rounds):
        return keep_round_faults(median_rows(rounds, key, "step_ms"), rounds, key)

    def run_bench(runs, label_rounds=lambda rounds: rounds):
        # The report is rewritten after every round: a run cut short keeps the rounds it did.
        rounds = interleaved(r, runs, args.rounds, lambda done: publish(
            rows + bench_rows(label_rounds(done)), r, args, load_before))
        rows.extend(bench_rows(label_rounds(rounds)))

    if "ddp" not in skip:
        steps = ["--steps", "3", "--iters", "2", "--warmup", "2"] if args.quick else []
        run_bench(bench_runs("ddp.py", args.ranks, steps, "ddp", args.bind_to) + [
            hvd_run(args.ranks, steps, args.bind_to)], as_ddp_rows)
    if "fsdp" not in skip:
        steps = ["--steps", "1", "--iters", "1", "--warmup", "1", "--settle", "0",
                 "--depth", "4"] if args.quick else []
        for n in (int(x) for x in args.fsdp_ranks.split(",")):
            run_bench(bench_runs("fsdp.py", n, steps, "fsdp2", args.bind_to))
    print(publish(rows, r, args, load_before))


if __name__ == "__main__":
    main()
