"""Markdown report of bench/torch_distributed/run.py: one table per bench (DDP samples/s, FSDP2
step time), perseus against Gloo per rank count, with every round's figure and the issue's bar.

    python bench/torch_distributed/make_report.py bench/results/torch_distributed.jsonl
"""
import json
import sys

# The bars the backend is held to (the perseus figure over Gloo's at the same ranks).
DDP_BAR = 1.4   # samples/s: at least 1.4x Gloo
FSDP_BAR = 0.5  # step time: at most 0.5x Gloo's


def _find(rows, bench, library, ranks):
    return next((r for r in rows if r.get("bench") == bench and r.get("library") == library
                 and r.get("ranks") == ranks), None)


def _verdict(ratio, sense, bar, floor_ratio):
    """' (bar >= 1.4x: met)'; where missed and the floor (row `local`) misses it too in the same
    run, says so: no backend could have met it there."""
    def meets(r):
        return r >= bar if sense == ">=" else r <= bar
    if meets(ratio):
        return " (bar %s %.1fx: met)" % (sense, bar)
    if floor_ratio is not None and not meets(floor_ratio):
        return " (bar %s %.1fx: NOT met; out of reach in this run, the floor is %.2fx)" % (
            sense, bar, floor_ratio)
    return " (bar %s %.1fx: NOT met)" % (sense, bar)


def _rounds(row):
    """Each round's step ms, with its page faults per step in parentheses where known."""
    times = row.get("rounds_step_ms", [row["step_ms"]])
    faults = row.get("rounds_faults_per_step") or [None] * len(times)
    return ", ".join("%.0f" % t if f is None else "%.0f (%.0f)" % (t, f)
                     for t, f in zip(times, faults))


def _by_round(row, gloo, inverse):
    """'; by round 1.23x, 1.44x': the ratio to Gloo within each round, whose backends ran back to
    back, so that a drift of the machine between rounds does not enter it (the median rows can
    come from different rounds). `inverse`: the ratio is Gloo's step over this row's."""
    mine, theirs = row.get("rounds_step_ms"), gloo.get("rounds_step_ms")
    if not mine or not theirs or len(mine) != len(theirs) or len(mine) < 2:
        return ""
    ratios = [(g / m if inverse else m / g) for m, g in zip(mine, theirs)]
    return "; by round " + ", ".join("%.2fx" % r for r in ratios)


def ddp_table(rows):
    out = ["| ranks | model | backend | samples/s | step ms (median of rounds) | rounds' step ms "
           "(page faults/step) | vs Gloo | bucket allreduces alone ms |",
           "|---|---|---|---|---|---|---|---|"]
    for ranks in sorted({r["ranks"] for r in rows if r.get("bench") == "ddp"}):
        gloo = _find(rows, "ddp", "gloo", ranks)
        for lib in ("perseus", "gloo", "hvd", "local"):
            row = _find(rows, "ddp", lib, ranks)
            if row is None:
                continue
            ratio = row["samples_per_s"] / gloo["samples_per_s"] if gloo else None
            floor = _find(rows, "ddp", "local", ranks)
            floor_ratio = floor["samples_per_s"] / gloo["samples_per_s"] if gloo and floor else None
            verdict = "" if ratio is None or lib != "perseus" else _verdict(
                ratio, ">=", DDP_BAR, floor_ratio) + _by_round(row, gloo, True) + _with_comm(
                    row, floor, gloo)
            out.append("| %d | %s (%d tensors, %d params) | %s | %.0f | %.1f | %s | %s%s | %s |" % (
                ranks, row["model"], row["tensors"], row["params"], lib, row["samples_per_s"],
                row["step_ms"], _rounds(row), "%.2fx" % ratio if ratio else "-", verdict,
                _comm(row)))
    return out


def _comm(row):
    """ddp.py's `comm_ms`, with the bucket sizes it allreduced."""
    if "comm_ms" not in row or row.get("library") in ("local", "hvd"):
        return "-"
    sizes = row.get("bucket_bytes") or []
    return "%.2f (%s)" % (row["comm_ms"], " + ".join("%.1f MB" % (b / 1e6) for b in sizes))


def _with_comm(row, floor, gloo):
    """The floor's step plus this backend's bucket allreduces alone, as a ratio to Gloo: about
    the best this allreduce allows where a rank's compute and communication share one core."""
    if not floor or not gloo or "comm_ms" not in row:
        return ""
    best_ms = floor["step_ms"] + row["comm_ms"]
    return "; floor step + these allreduces alone: %.1f ms, %.2fx" % (
        best_ms, gloo["step_ms"] / best_ms)


def _split(row):
    """Rank 0's step split (fsdp.py): in collectives after the last rank arrived, waiting."""
    if "collective_ms" not in row:
        return "- | -"
    if row.get("library") == "local":
        return "%.0f (its copies) | -" % row["collective_ms"]
    return "%.0f | %.0f" % (row["collective_ms"], row["waiting_ms"])


def fsdp_table(rows):
    out = ["| ranks | model | backend | step ms (median of rounds) | rounds' step ms (page "
           "faults/step) | vs Gloo | in collectives ms | waiting for the last rank ms |",
           "|---|---|---|---|---|---|---|---|"]
    for ranks in sorted({r["ranks"] for r in rows if r.get("bench") == "fsdp2"}):
        gloo = _find(rows, "fsdp2", "gloo", ranks)
        for lib in ("perseus", "gloo", "local"):
            row = _find(rows, "fsdp2", lib, ranks)
            if row is None:
                continue
            ratio = row["step_ms"] / gloo["step_ms"] if gloo else None
            floor = _find(rows, "fsdp2", "local", ranks)
            floor_ratio = floor["step_ms"] / gloo["step_ms"] if gloo and floor else None
            verdict = "" if ratio is None or lib != "perseus" else _verdict(
                ratio, "<=", FSDP_BAR, floor_ratio) + _by_round(row, gloo, False)
            out.append("| %d | %s (%.1fM params, batch %d/rank) | %s | %.0f | %s | %s%s | %s |" % (
                ranks, row["model"], row["params"] / 1e6, row["batch_per_rank"], lib,
                row["step_ms"], _rounds(row), "%.2fx" % ratio if ratio else "-", verdict,
                _split(row)))
    return out


def write_report(rows, cmd, machine, stamp, path):
    lines = ["# torch.distributed: backend perseus against Gloo (CPU)", "",
             "Made by `%s` at %s on %s. Every bench ran its backends in interleaved rounds "
             "(order rotated per round); the row is the median round. Every rank computes with "
             "one thread and, where the machine line says so, runs bound to its own share of "
             "the cores, whatever its backend (placement.py; perseusrun binds the `hvd` row's "
             "ranks alike). Row `local` is the floor: the same step on a backend that "
             "communicates nothing (bench/torch_distributed/local_backend.py); its ratio to "
             "Gloo is the best any backend could reach. Row `hvd` is the Horovod API's "
             "DistributedOptimizer on the same model and steps (bench/training). In parentheses "
             "after each round's step: the minor page faults per timed step of the rank that "
             "took most. glibc gives the free top of the heap back to the "
             "kernel past its trim threshold, and the next step faults those pages in again, "
             "zeroed; whether a process falls into that depends on the order of its allocations "
             "and frees, not on what its backend sends, and a few thousand a step cost several "
             "ms (bench/training/page_faults.py). Read a row's time with its count." %
             (cmd, stamp, machine), "",
             "## DDP training (bench/torch_distributed/ddp.py)", "",
             "bench/training's model and step loop (torch_train_bench.py), SGD with momentum, "
             "synthetic data; samples/s over all ranks at the slowest rank's median step. "
             "`bucket allreduces alone`: after training, in the same processes, tensors of "
             "the sizes of DDP's buckets allreduced as DDP issues them, with no compute "
             "(ddp.py's `comm_ms`, the median round's); each rank computes and communicates on "
             "one core, so the `local` step plus that time is about the best step the "
             "backend's allreduce allows.", ""]
    lines += ddp_table(rows)
    lines += ["", "## FSDP2 step time (bench/torch_distributed/fsdp.py)", "",
              "Each Linear+ReLU block `fully_shard`ed, then the root; SGD; the slowest rank's "
              "median step. FSDP2 on CPU makes every all-gather and reduce-scatter a blocking "
              "call (no overlap with compute), so a step is its compute and copies (the `local` "
              "row) plus the time in those calls. Rank 0's time in them per step (mean over the "
              "median round's steps) splits into `in collectives`, from the last rank's call "
              "to the return (the backend's own time), and `waiting for the last rank`, before "
              "that (another rank's compute, or its previous collective, ending later); "
              "bench/torch_distributed/collective_clock.py.", ""]
    lines += fsdp_table(rows)
    skipped = [r for r in rows if r.get("collective") == "skipped"]
    if skipped:
        lines += ["", "## Runs that failed", ""]
        lines += ["- %s: %s" % (r["what"], r["reason"]) for r in skipped]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def main():
    with open(sys.argv[1]) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    print("\n".join(ddp_table(rows) + [""] + fsdp_table(rows)))


if __name__ == "__main__":
    main()
