"""Helpers shared by the report writers (report.py, report_engine.py, report_training.py):
sections of docs/PERFORMANCE.md, number formatting, matplotlib set-up."""
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "PERFORMANCE.md")
IMG = os.path.join(ROOT, "docs", "img")


def human(nbytes):
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:g} {unit}"
    return f"{nbytes} B"


def us(v):
    """Microseconds with 3 significant digits, switching to ms above 10 ms."""
    if v >= 10000:
        return f"{v / 1000:.3g} ms"
    return f"{v:.3g} µs"


def replace_section(name, body, doc=None):
    """Writes `body` between <!-- BEGIN name --> and <!-- END name --> in `doc` (default:
    PERFORMANCE.md, looked up at call time), appending the section if it is new; text outside
    the markers is left alone."""
    doc = doc or DOC
    os.makedirs(os.path.dirname(doc), exist_ok=True)
    text = open(doc).read() if os.path.exists(doc) else "# Performance\n"
    begin, end = f"<!-- BEGIN {name} -->", f"<!-- END {name} -->"
    block = f"{begin}\n{body.rstrip()}\n{end}"
    if begin in text:
        text = re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: block, text, flags=re.S)
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    with open(doc, "w") as f:
        f.write(text)


def pyplot():
    """matplotlib.pyplot on the Agg backend, or None where matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def save(fig, plt, name):
    os.makedirs(IMG, exist_ok=True)
    fig.tight_layout()
    fig.savefig(os.path.join(IMG, name), dpi=110)
    plt.close(fig)
    return f"img/{name}"


def fastest_round(row):
    """A row's fastest interleaved round (its time when it ran alone otherwise): the library
    at its best, whatever the machine did while the other library ran."""
    return min(row.get("rounds_time_us") or [row["time_us"]])
