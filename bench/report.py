"""Turns benchmark rows (JSON lines) into tables and plots in docs/PERFORMANCE.md.

Each producer owns one section of PERFORMANCE.md, between
`<!-- BEGIN name -->` and `<!-- END name -->`, so several benchmarks can write the same file.
"""
import os
import re
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "PERFORMANCE.md")
IMG = os.path.join(ROOT, "docs", "img")
PEERS = ("perseus", "openmpi", "torch-gloo", "horovod")


def human(nbytes):
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:g} {unit}"
    return f"{nbytes} B"


def replace_section(name, body):
    os.makedirs(os.path.dirname(DOC), exist_ok=True)
    text = open(DOC).read() if os.path.exists(DOC) else "# Performance\n"
    begin, end = f"<!-- BEGIN {name} -->", f"<!-- END {name} -->"
    block = f"{begin}\n{body.rstrip()}\n{end}"
    if begin in text:
        text = re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: block, text, flags=re.S)
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    with open(DOC, "w") as f:
        f.write(text)


def plot_busbw(rows, collective, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(7, 4))
    for lib in PEERS:
        pts = sorted((r["bytes"], r["busbw_gbs"]) for r in rows
                     if r["library"] == lib and r["collective"] == collective)
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=lib)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title(f"{collective}, {rows[0]['ranks']} ranks")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def collective_table(rows, collective):
    by_size = defaultdict(dict)
    for r in rows:
        if r["collective"] == collective and "busbw_gbs" in r:
            by_size[r["bytes"]][r["library"]] = r
    libs = [l for l in PEERS if any(l in d for d in by_size.values())]
    head = "| size | " + " | ".join(f"{l} µs / GB/s" for l in libs) + " | Perseus vs best peer |"
    lines = [head, "|" + "---|" * (len(libs) + 2)]
    for size in sorted(by_size):
        d = by_size[size]
        cells = []
        for l in libs:
            r = d.get(l)
            mark = " ✗WRONG" if r and r.get("wrong") else ""
            cells.append(f"{r['time_us']:.2f} / {r['busbw_gbs']:.2f}{mark}" if r else "—")
        peers = [d[l]["time_us"] for l in libs if l != "perseus" and l in d]
        ratio = (f"{min(peers) / d['perseus']['time_us']:.2f}× faster" if peers and "perseus" in d
                 else "—")
        lines.append(f"| {human(size)} | " + " | ".join(cells) + f" | {ratio} |")
    return "\n".join(lines)


def write_report(rows, cmd, machine):
    os.makedirs(IMG, exist_ok=True)
    date = rows[0]["date"] if rows else ""
    out = [f"## CPU collectives, {rows[0]['ranks'] if rows else '?'} ranks on one host",
           "", f"Measured {date} on {machine}.", "", f"Command: `{cmd}`", "",
           "Times are the median of per-sample means (max over ranks), as in "
           "perf-anchors.md §5; busbw follows nccl-tests. All libraries ran in the same command, "
           "one after the other.", ""]
    for coll in ("allreduce", "allgather", "broadcast", "reducescatter"):
        if not any(r["collective"] == coll for r in rows):
            continue
        out += [f"### {coll}", "", collective_table(rows, coll), ""]
        if plot_busbw(rows, coll, os.path.join(IMG, f"cpu_{coll}_busbw.png")):
            out += [f"![{coll} bus bandwidth](img/cpu_{coll}_busbw.png)", ""]
    for r in rows:
        if r["collective"] == "allreduce-latency":
            out += ["### Small-tensor latency through the engine", "",
                    f"4-byte allreduce, submission to completion: median **{r['time_us']:.2f} µs**, "
                    f"p99 {r['p99_us']:.2f} µs over {r['iters']} ops.", ""]
        if r["collective"] == "resnet50-step":
            out += ["### ResNet-50 gradient step", "",
                    f"{r['tensors']} tensors, {r['bytes'] / 2**20:.1f} MiB in all: step "
                    f"**{r['time_us'] / 1000:.2f} ms** vs one allreduce of the same bytes "
                    f"{r['single_allreduce_us'] / 1000:.2f} ms (ratio {r['ratio']:.3f}).", ""]
    replace_section("cpu-collectives", "\n".join(out))
