#!/usr/bin/env python3
"""BatchNorm against PerseusSyncBatchNorm at small per-rank batches: runs every
configuration of python/perseus/examples/mxnet_sync_bn_accuracy.py (or the torch twin) under
perseusrun for several seeds, then writes the plot (docs/img/sync_bn_accuracy.png) and the
table (docs/sync_bn.md, between its markers) from the records.

    python3 bench/sync_bn_accuracy.py                      # the full run of docs/sync_bn.md
    python3 bench/sync_bn_accuracy.py --smoke              # CI: 2 tiny epochs, nothing written

Configurations (all with --np ranks and the same global batches):
  plain      gluon.nn.BatchNorm: statistics of one rank's batch
  plain-2hosts  the same on the two hosts of sync-local: its accuracy matches plain (a
             control), its step time is the baseline of sync-local's cost
  sync-local PerseusSyncBatchNorm(comm_scope=0), ranks split over two hosts
             (perseusrun -H localhost:N/2,127.0.0.1:N/2: two host names of this machine, so
             the job has two hosts of N/2 ranks each and the LOCAL process set is a host's)
  sync       PerseusSyncBatchNorm(comm_scope=1): statistics of all ranks' batches

Every run's per-epoch records are kept in --out-dir as JSON lines; --report-only rebuilds the
plot and the table from them without training.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from report_common import pyplot, replace_section  # noqa: E402

EXAMPLES = os.path.join(ROOT, "python", "perseus", "examples")
DOC = os.path.join(ROOT, "docs", "sync_bn.md")
PLOT = os.path.join(ROOT, "docs", "img", "sync_bn_accuracy.png")
SECTION = "sync-bn-accuracy"
CONFIGS = ("plain", "plain-2hosts", "sync-local", "sync")
LABELS = {"plain": "BatchNorm (per rank)",
          "plain-2hosts": "BatchNorm (per rank), two hosts",
          "sync-local": "PerseusSyncBatchNorm, comm_scope=0 (per host)",
          "sync": "PerseusSyncBatchNorm, comm_scope=1 (all ranks)"}
COLORS = {"plain": "tab:red", "plain-2hosts": "tab:gray", "sync-local": "tab:orange",
          "sync": "tab:blue"}
TWO_HOSTS = ("plain-2hosts", "sync-local")
# Whose step time each configuration's cost is measured against: the same layout of hosts.
BASELINE = {"sync": "plain", "sync-local": "plain-2hosts"}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--framework", choices=("mxnet", "torch"), default="mxnet")
    p.add_argument("--np", type=int, default=4, help="ranks (even: two hosts of np/2)")
    p.add_argument("--batch-per-rank", type=int, nargs="+", default=[2])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--train-samples", type=int, default=2400,
                   help="the first N images of the 60000 (a subset: 4 ranks must fit on 2 cores)")
    p.add_argument("--test-samples", type=int, default=5000)
    p.add_argument("--configs", nargs="+", choices=CONFIGS, default=list(CONFIGS))
    p.add_argument("--extra", default="", help="more arguments for the example (quoted)")
    p.add_argument("--out-dir", help="where the per-run JSON records go (default: "
                   "bench/results/sync_bn_accuracy; with --smoke a new temporary folder)")
    p.add_argument("--plot", default=PLOT)
    p.add_argument("--doc", default=DOC, help="markdown file whose table section is rewritten")
    p.add_argument("--smoke", action="store_true",
                   help="CI: 2 epochs on at most 400 images, one seed; the plot and table "
                   "are only written where --plot and --doc point elsewhere")
    p.add_argument("--report-only", action="store_true",
                   help="rebuild the plot and table from --out-dir without training")
    p.add_argument("--timeout", type=int, default=1800, help="seconds per run")
    args = p.parse_args(argv)
    if args.np < 2 or args.np % 2:
        p.error("--np must be even and at least 2 (two simulated hosts of np/2 ranks)")
    if args.framework == "torch":
        args.configs = [c for c in args.configs if c not in TWO_HOSTS]
    if args.out_dir is None:
        args.out_dir = (tempfile.mkdtemp(prefix="sync-bn-smoke-") if args.smoke else
                        os.path.join(HERE, "results", "sync_bn_accuracy"))
    if args.smoke:
        args.seeds, args.epochs = args.seeds[:1], 2
        args.train_samples = min(args.train_samples, 400)
        args.test_samples = min(args.test_samples, 400)
    return args


def run_name(args, config, batch, seed):
    return "%s-%s-b%d-np%d-s%d" % (args.framework, config, batch, args.np, seed)


def command(args, config, batch, seed, record):
    """The perseusrun line of one run."""
    hosts = []
    flags = ["--bn", "sync" if config.startswith("sync") else "plain"]
    if config in TWO_HOSTS:
        half = args.np // 2
        hosts = ["-H", "localhost:%d,127.0.0.1:%d" % (half, half)]
    if args.framework == "mxnet" and config.startswith("sync"):
        flags += ["--comm-scope", "0" if config == "sync-local" else "1"]
    example = os.path.join(EXAMPLES, "%s_sync_bn_accuracy.py" % args.framework)
    return ([sys.executable, "-m", "perseus.runner", "-np", str(args.np)] + hosts +
            [sys.executable, example] + flags +
            ["--batch-size", str(batch), "--seed", str(seed), "--epochs", str(args.epochs),
             "--train-samples", str(args.train_samples),
             "--test-samples", str(args.test_samples), "--json", record] + args.extra.split())


def run_all(args):
    os.makedirs(args.out_dir, exist_ok=True)
    env = dict(os.environ)
    # One compute thread per rank: ranks outnumber the cores on the machines this runs on.
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("MXNET_USE_OPERATOR_TUNING", "0")
    env.setdefault("MKL_NUM_THREADS", "1")
    # Seeds outermost, configurations innermost: drifting machine load spreads evenly.
    for seed in args.seeds:
        for batch in args.batch_per_rank:
            for config in args.configs:
                record = os.path.join(args.out_dir, run_name(args, config, batch, seed) +
                                      ".jsonl")
                cmd = command(args, config, batch, seed, record)
                print("$ " + " ".join(cmd[2:]), flush=True)
                tic = time.time()
                result = subprocess.run(cmd, env=env, timeout=args.timeout,
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True)
                lines = [l for l in result.stdout.splitlines() if "epoch" in l]
                print("\n".join("  " + l for l in lines[-args.epochs:]), flush=True)
                if result.returncode != 0:
                    sys.stdout.write(result.stdout[-4000:])
                    raise SystemExit("run %s failed (exit %d)"
                                     % (run_name(args, config, batch, seed), result.returncode))
                print("  %.0f s wall" % (time.time() - tic), flush=True)


def load_records(args):
    rows = []
    for seed in args.seeds:
        for batch in args.batch_per_rank:
            for config in args.configs:
                path = os.path.join(args.out_dir, run_name(args, config, batch, seed) + ".jsonl")
                if not os.path.exists(path):
                    raise SystemExit("%s is missing: run without --report-only first" % path)
                for line in open(path):
                    row = json.loads(line)
                    row["config"] = config
                    rows.append(row)
    return rows


def _mean_std(values):
    n = len(values)
    mean = sum(values) / n
    std = (sum((v - mean) ** 2 for v in values) / (n - 1)) ** 0.5 if n > 1 else 0.0
    return mean, std


def summarize(rows, config, batch):
    """Per-epoch (mean, std, min, max) test accuracy over seeds, plus per-seed final/best."""
    mine = [r for r in rows if r["config"] == config and r["batch_per_rank"] == batch]
    seeds = sorted({r["seed"] for r in mine})
    epochs = sorted({r["epoch"] for r in mine})
    acc = {(r["seed"], r["epoch"]): r["test_accuracy"] for r in mine}
    curve = []
    for e in epochs:
        vals = [acc[(s, e)] for s in seeds]
        curve.append((e,) + _mean_std(vals) + (min(vals), max(vals)))
    final = [acc[(s, epochs[-1])] for s in seeds]
    best = [max(acc[(s, e)] for e in epochs) for s in seeds]
    steps = sum(r["steps"] for r in mine)
    step_ms = sum(r["train_seconds"] for r in mine) * 1000.0 / steps
    epoch_s = _mean_std([r["train_seconds"] for r in mine])
    loss = [r["train_loss"] for r in mine if r["epoch"] == epochs[-1]]
    return dict(seeds=seeds, curve=curve, final=final, best=best, step_ms=step_ms, loss=loss,
                epoch_s=epoch_s, steps_per_epoch=mine[0]["steps"],
                local_size=mine[0]["local_size"])


def plot(args, rows):
    plt = pyplot()
    if plt is None:
        print("matplotlib is missing: no plot", file=sys.stderr)
        return
    batches = args.batch_per_rank
    fig, axes = plt.subplots(1, len(batches), figsize=(6.4 * len(batches), 4.4), squeeze=False)
    for ax, batch in zip(axes[0], batches):
        for config in args.configs:
            s = summarize(rows, config, batch)
            e = [c[0] for c in s["curve"]]
            mean = [100 * c[1] for c in s["curve"]]
            ax.plot(e, mean, marker="o", color=COLORS[config],
                    linestyle="--" if config == "plain-2hosts" else "-",
                    label="%s, final %.1f%%" % (LABELS[config], 100 * _mean_std(s["final"])[0]))
            ax.fill_between(e, [100 * c[3] for c in s["curve"]],
                            [100 * c[4] for c in s["curve"]], color=COLORS[config], alpha=0.18,
                            linewidth=0)
        ax.set_xlabel("epoch")
        ax.set_ylabel("test accuracy (%)")
        ax.set_xticks(e)
        ax.set_title("%s, %d ranks x %d samples per rank (global batch %d)"
                     % ("MXNet Gluon" if args.framework == "mxnet" else "PyTorch", args.np,
                        batch, args.np * batch), fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="best")
    fig.suptitle("Fashion-MNIST, %d training images, %d seeds%s\nline = mean, band = min..max"
                 % (args.train_samples, len(args.seeds),
                    ", " + args.extra.strip() if args.extra.strip() else ""), fontsize=10)
    fig.tight_layout()
    os.makedirs(os.path.dirname(args.plot), exist_ok=True)
    fig.savefig(args.plot, dpi=110)
    plt.close(fig)
    print("wrote " + args.plot)


def section_name(args):
    """The doc section of this run: one per framework and set of --extra arguments."""
    slug = "".join(c if c.isalnum() else "-" for c in args.extra.strip()).strip("-")
    framework = "" if args.framework == "mxnet" else "-" + args.framework
    return SECTION + framework + ("-" + slug if slug else "")


def reproduce_line(args):
    line = "python3 bench/sync_bn_accuracy.py --framework %s --np %d --batch-per-rank %s " \
           "--seeds %s --epochs %d --train-samples %d --test-samples %d" % (
               args.framework, args.np, " ".join(map(str, args.batch_per_rank)),
               " ".join(map(str, args.seeds)), args.epochs, args.train_samples,
               args.test_samples)
    if args.extra:
        line += " --extra='%s'" % args.extra
    if os.path.abspath(args.out_dir) != os.path.join(HERE, "results", "sync_bn_accuracy"):
        line += " --out-dir %s" % os.path.relpath(args.out_dir, ROOT)
    if os.path.abspath(args.plot) != PLOT:
        line += " --plot %s" % os.path.relpath(args.plot, ROOT)
    return line


def table(args, rows):
    out = ["Produced by", "", "    " + reproduce_line(args), "",
           "| per-rank batch | configuration | statistics over | final accuracy (mean ± sd) "
           "| best accuracy (mean ± sd) | per seed final | last epoch's train loss "
           "| time per epoch (s) | ms per step |",
           "|---|---|---|---|---|---|---|---|---|"]
    for batch in args.batch_per_rank:
        step_ms = {c: summarize(rows, c, batch)["step_ms"] for c in args.configs}
        for config in args.configs:
            s = summarize(rows, config, batch)
            over = {"plain": batch, "plain-2hosts": batch, "sync-local": batch * args.np // 2,
                    "sync": batch * args.np}[config]
            fm, fs = _mean_std(s["final"])
            bm, bs = _mean_std(s["best"])
            base = step_ms.get(BASELINE.get(config))
            cost = "" if base is None else " (%+.0f ms, x%.1f)" % (s["step_ms"] - base,
                                                                  s["step_ms"] / base)
            out.append("| %d | %s | %d samples | %.2f ± %.2f %% | %.2f ± %.2f %% | %s | %.2f | "
                       "%.1f ± %.1f | %.1f%s |"
                       % (batch, LABELS[config], over, 100 * fm, 100 * fs, 100 * bm, 100 * bs,
                          " ".join("%.1f" % (100 * v) for v in s["final"]),
                          _mean_std(s["loss"])[0], s["epoch_s"][0], s["epoch_s"][1],
                          s["step_ms"], cost))
    out += ["", "%d ranks, %d epochs of %d training images (%d steps per epoch at %d per "
            "rank), test on %d images, seeds %s." % (
                args.np, args.epochs, args.train_samples,
                args.train_samples // (args.np * args.batch_per_rank[0]),
                args.batch_per_rank[0], args.test_samples, " ".join(map(str, args.seeds)))]
    return "\n".join(out)


def main(argv=None):
    args = parse_args(argv)
    if not args.report_only:
        run_all(args)
    if args.smoke and args.plot == PLOT and args.doc == DOC:
        # A smoke run's numbers are not the doc's: leave both alone.
        return
    rows = load_records(args)
    plot(args, rows)
    replace_section(section_name(args), table(args, rows), doc=args.doc)
    print("wrote the table of " + args.doc)


if __name__ == "__main__":
    main()
