"""Turns benchmark rows (JSON lines) into tables and plots in docs/PERFORMANCE.md.

Each producer owns one section of PERFORMANCE.md, between
`<!-- BEGIN name -->` and `<!-- END name -->`, so several benchmarks can write the same file and
hand-written text outside the markers stays. run_all.py calls write_report(); to redo the
report from saved rows: python bench/report.py bench/results/latest.jsonl
"""
import json
import os
import sys
from collections import defaultdict

from report_common import IMG, fastest_round, human, pyplot, replace_section, save
from report_core import core_section
from report_engine import latency_section, negotiation_section
from report_shortfalls import shortfalls_section
from report_training import training_section

# "perseus-py" is Perseus through the same Python script as Horovod: shown, never a peer.
PEERS = ("perseus", "perseus-py", "openmpi", "torch-gloo", "horovod", "horovod-mpi")
OTHERS = ("openmpi", "torch-gloo", "horovod", "horovod-mpi")
ALLREDUCE_BAR_FROM = 1024  # Perseus ahead of every peer at every allreduce size from 1 KiB


def plot_busbw(rows, collective):
    plt = pyplot()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    for lib in PEERS:
        pts = sorted((r["bytes"], r["busbw_gbs"]) for r in rows
                     if r["library"] == lib and r["collective"] == collective
                     and r["busbw_gbs"] > 0)  # 0: under the printed precision (log axis)
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=lib)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title(f"{collective}, {rows[0]['ranks']} ranks")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    return save(fig, plt, f"cpu_{collective}_busbw.png")


def by_size(rows, collective):
    table = defaultdict(dict)
    for r in rows:
        if r["collective"] == collective and "busbw_gbs" in r:
            table[r["bytes"]][r["library"]] = r
    return table


def collective_table(rows, collective):
    table = by_size(rows, collective)
    libs = [l for l in PEERS if any(l in d for d in table.values())]
    head = "| size | " + " | ".join(f"{l} µs / GB/s" for l in libs) + " | Perseus vs best peer |"
    lines = [head, "|" + "---|" * (len(libs) + 2)]
    for size in sorted(table):
        d = table[size]
        cells = []
        for l in libs:
            r = d.get(l)
            mark = " ✗WRONG" if r and r.get("wrong") else ""
            cells.append(f"{r['time_us']:.2f} / {r['busbw_gbs']:.2f}{mark}" if r else "—")
        peers = [(d[l]["time_us"], l) for l in OTHERS if l in d]
        ratio = "—"
        if peers and "perseus" in d:
            best, who = min(peers)
            ratio = f"{best / d['perseus']['time_us']:.2f}× ({who})"
        lines.append(f"| {human(size)} | " + " | ".join(cells) + f" | {ratio} |")
    return "\n".join(lines)


def allreduce_verdict(rows):
    """Ahead by the median of the interleaved rounds, and also when each library is taken at
    its fastest round: a peer whose rounds mostly ran while the machine was slow (another
    placement of its cores) does not make Perseus ahead."""
    table = by_size(rows, "allreduce")
    behind, behind_fast, checked = [], [], 0
    for size in sorted(table):
        d = table[size]
        peers = [(d[l]["time_us"], l) for l in OTHERS if l in d]
        if size < ALLREDUCE_BAR_FROM or "perseus" not in d or not peers:
            continue
        checked += 1
        best, who = min(peers)
        if d["perseus"]["time_us"] >= best:
            behind.append(f"{human(size)} ({who} {best / d['perseus']['time_us']:.2g}×)")
        fast, fast_who = min((fastest_round(d[l]), l) for l in OTHERS if l in d)
        if fastest_round(d["perseus"]) >= fast:
            behind_fast.append(f"{human(size)} ({fast_who} {fast / fastest_round(d['perseus']):.2g}×)")
    if not checked:
        return None
    text = (f"Perseus ahead at {checked - len(behind)} of {checked} sizes from 1 KiB"
            + (f"; behind (best peer's time / Perseus's) at {', '.join(behind)}"
               if behind else "")
            + (f"; each library at its fastest round: behind at {', '.join(behind_fast)}"
               if behind_fast else "; also with each library at its fastest round"))
    return {"ok": not behind and not behind_fast, "text": text}


def collectives_section(rows):
    out = [f"## CPU collectives, {rows[0]['ranks']} ranks on one host", "",
           "Times are the median of per-sample means, each sample's time the slowest rank's; "
           "the allreduce rows of perseus and openmpi are the median of alternating sweeps "
           "(run_all.py ALLREDUCE_ROUNDS; on a virtual machine the cross-core rate changes for "
           "seconds at a time with the placement of the cores), which "
           "every row keeps in `rounds_time_us`; busbw follows nccl-tests. *perseus* is the C API (engine, negotiation and fusion "
           "included): allreduce and broadcast as blocking calls "
           "(`perseus_allreduce_blocking`, as `MPI_Allreduce` blocks), allgather and "
           "reducescatter submitted and waited for through a handle (their outputs are the "
           "library's); *perseus-py* is Perseus through bench/peers/hvd_collectives_bench.py, the "
           "same Python script and calls (`hvd.allreduce_(x, name=...)`) that measure *horovod*. "
           "The last column is the best of openmpi, torch-gloo, horovod (and horovod-mpi, Horovod "
           "over Open MPI, where its wheel has MPI) over perseus (> 1: "
           "Perseus is faster).", ""]
    for coll in ("allreduce", "allgather", "broadcast", "reducescatter"):
        if not any(r["collective"] == coll for r in rows):
            continue
        out += [f"### {coll}", "", collective_table(rows, coll), ""]
        link = plot_busbw(rows, coll)
        if link:
            out += [f"![{coll} bus bandwidth]({link})", ""]
    for r in rows:
        if r["collective"] == "resnet50-step":
            out += ["### ResNet-50 gradient step (C API)", "",
                    f"{r['tensors']} tensors, {r['bytes'] / 2**20:.1f} MiB in all: step "
                    f"**{r['time_us'] / 1000:.2f} ms** vs one allreduce of the same bytes "
                    f"{r['single_allreduce_us'] / 1000:.2f} ms (ratio {r['ratio']:.3f}).", ""]
    return "\n".join(out)


def bar_section(verdicts):
    out = ["## The bar", "",
           f"Ratios from one run, {verdicts['ranks']} ranks on this host. ✅ met, ❌ not met "
           "(see *Where Perseus is not ahead* for the measured reason), ➖ not measured.", "",
           "| criterion | result |", "|---|---|"]
    for name, v in verdicts["items"]:
        mark = "➖" if v is None else ("✅" if v["ok"] else "❌")
        out.append(f"| {name} | {mark} {v['text'] if v else 'not measured (see Skipped)'} |")
    return "\n".join(out)


def skipped_section(rows, horovod):
    skipped = [r for r in rows if r["collective"] == "skipped"]
    out = ["## Skipped or failed measurements", "", f"Horovod: {horovod}", ""]
    if not skipped:
        return "\n".join(out + ["Every measurement ran."])
    out += ["| measurement | reason |", "|---|---|"]
    out += [f"| {r['what']} | {r['reason'].replace('|', '/')} |" for r in skipped]
    return "\n".join(out)


def write_report(rows, cmd, machine, horovod="not probed"):
    os.makedirs(IMG, exist_ok=True)
    ranks = max((r.get("ranks", 0) for r in rows if r.get("collective") != "train"), default=2)
    date = rows[0].get("date", "") if rows else ""
    if machine:  # None when redrawn from saved rows: the run section stays as measured
        replace_section("run", "\n".join([
            f"Measured {date} on {machine}.", "", f"Command: `{cmd}` (one run, every library "
            "one after the other). Regenerate the text and plots from the saved rows with "
            "`python bench/report.py bench/results/latest.jsonl`.", "", f"Horovod: {horovod}."]
            + (["", "**Smoke run (--quick): 3 samples, short windows, sizes up to 1 MiB; the "
                "figures below check the scripts, they are not measurements.**"]
               if "--quick" in cmd else [])))
    lat_md, lat_v = latency_section(rows)
    neg_md, neg_v = negotiation_section(rows)
    train_md, train_v = training_section(rows, ranks)
    items = [("allreduce ahead of every peer from 1 KiB up", allreduce_verdict(rows)),
             ("small-tensor latency ≥ 20× lower than Horovod's", lat_v)]
    for fw in ("torch", "mxnet"):
        v = next((v for v in train_v if v["text"].startswith(fw)), None)
        items.append((f"training throughput at {ranks} ranks ≥ best peer ({fw})", v))
    items.append(("negotiation cost flat in tensor count where Horovod's grows", neg_v))
    replace_section("bar", bar_section({"ranks": ranks, "items": items}))
    if any("busbw_gbs" in r for r in rows):
        replace_section("cpu-collectives", collectives_section(rows))
        replace_section("core", core_section(rows))
    replace_section("latency", lat_md)
    replace_section("negotiation", neg_md)
    replace_section("training", train_md)
    replace_section("shortfalls", shortfalls_section(rows, ranks, lat_v, neg_v))
    replace_section("skipped", skipped_section(rows, horovod))


if __name__ == "__main__":
    with open(sys.argv[1] if len(sys.argv) > 1 else "bench/results/latest.jsonl") as f:
        saved = [json.loads(line) for line in f if line.strip()]
    write_report(saved, cmd="", machine=None, horovod="see the run section")
