"""bench/report.py on synthetic rows: every section is written, the bar's verdicts follow the
numbers, hand-written text outside the markers survives, and skipped peers are listed.

    python -m pytest bench/tests -q
"""
import os
import sys

import pytest

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, BENCH)

import report  # noqa: E402
import report_common  # noqa: E402


def coll_rows():
    rows = []
    for size in (4, 1024, 1 << 20):
        for lib, t in (("perseus", 1.0), ("openmpi", 2.0), ("torch-gloo", 50.0),
                       ("horovod", 30.0), ("perseus-py", 5.0)):
            rows.append({"library": lib, "collective": "allreduce", "ranks": 2, "bytes": size,
                         "time_us": t * (1 + size / 1e5), "busbw_gbs": size / (t * 1e3) + 1e-6,
                         "wrong": 0})
    return rows


def engine_rows(perseus_growth, horovod_growth):
    rows = [{"library": "perseus", "collective": "allreduce-latency", "ranks": 2, "bytes": 4,
             "time_us": 8.0, "p99_us": 20.0, "iters": 100},
            {"library": "perseus", "collective": "async-latency", "ranks": 2, "bytes": 4,
             "time_us": 15.0, "p90_us": 20.0, "iters": 100},
            {"library": "horovod", "collective": "async-latency", "ranks": 2, "bytes": 4,
             "time_us": 1500.0, "p90_us": 2000.0, "iters": 100}]
    for lib, growth in (("perseus", perseus_growth), ("horovod", horovod_growth)):
        for t in (10, 100, 1000):
            engine = 100.0 * growth ** ((t // 10).bit_length() / 7)
            rows.append({"library": lib, "collective": "negotiation", "ranks": 2, "tensors": t,
                         "bytes": 16 * t, "time_us": engine + t, "submit_us": float(t),
                         "engine_us": engine, "per_tensor_us": (engine + t) / t, "steps": 5})
    return rows


def train_rows(perseus_rate, peer_rate):
    rows = []
    for fw, mine, peer in (("torch", "perseus", "ddp"), ("mxnet", "perseus-trainer", "mxnet-ps")):
        for lib, rate in ((mine, perseus_rate), (peer, peer_rate)):
            for n in (1, 2):
                sps = rate * n * (1.0 if n == 1 else 0.9)
                rows.append({"library": lib, "framework": fw, "collective": "train", "ranks": n,
                             "batch_per_rank": 32, "step_ms": 32 * n / sps * 1e3,
                             "samples_per_s": sps, "tensors": 38, "params": 1000,
                             "model": "m"})
        rows.append({"library": "none", "framework": fw, "collective": "train", "ranks": 1,
                     "batch_per_rank": 32, "step_ms": 100.0, "samples_per_s": 320.0,
                     "tensors": 38, "params": 1000, "model": "m"})
    return rows


@pytest.fixture
def doc(tmp_path, monkeypatch):
    path = tmp_path / "PERFORMANCE.md"
    path.write_text("# Performance\n\nhand-written preface\n")
    monkeypatch.setattr(report_common, "DOC", str(path))
    monkeypatch.setattr(report_common, "IMG", str(tmp_path / "img"))
    monkeypatch.setattr(report, "IMG", str(tmp_path / "img"))
    return path


def write(rows):
    report.write_report(rows, cmd="python bench/run_all.py", machine="test host",
                        horovod="0.28.1")


def test_every_section_and_verdicts_when_ahead(doc):
    write(coll_rows() + engine_rows(1.5, 20.0) + train_rows(120.0, 100.0))
    text = doc.read_text()
    assert "hand-written preface" in text
    for name in ("run", "bar", "cpu-collectives", "latency", "negotiation", "training",
                 "shortfalls", "skipped"):
        assert f"<!-- BEGIN {name} -->" in text and f"<!-- END {name} -->" in text
    bar = text.split("<!-- BEGIN bar -->")[1].split("<!-- END bar -->")[0]
    assert bar.count("| ✅") == 5 and "| ❌" not in bar
    assert "Nowhere in this run." in text
    assert "100.0×" in text  # Horovod / Perseus latency


def test_shortfalls_and_skips_are_reported(doc):
    rows = coll_rows() + train_rows(80.0, 100.0)
    rows.append({"library": "horovod", "collective": "skipped", "what": "horovod sweep",
                 "ranks": 2, "reason": "import horovod.torch failed"})
    write(rows)
    write(rows)  # a second run replaces the sections, it does not append them again
    text = doc.read_text()
    assert text.count("<!-- BEGIN training -->") == 1
    assert "torch training at 2 ranks" in text and "mxnet training at 2 ranks" in text
    assert "| compute only (none) | 320 (100.0) |" in text and "wrapper costs" in text
    assert "| horovod sweep | import horovod.torch failed |" in text
    bar = text.split("<!-- BEGIN bar -->")[1].split("<!-- END bar -->")[0]
    assert "| ➖" in bar and "| ❌" in bar


def test_interleaved_rounds_keep_the_median_row_of_each_library():
    import run_all  # noqa: E402  (bench/run_all.py)

    rounds = [[{"library": "perseus", "collective": "allreduce", "bytes": 4, "time_us": t,
                "busbw_gbs": 4 / t}] for t in (3.0, 1.0, 2.0)]
    rounds[1].append({"library": "openmpi", "collective": "allreduce", "bytes": 4,
                      "time_us": 9.0, "busbw_gbs": 0.5})
    rows = {r["library"]: r for r in run_all.median_rows(rounds)}
    assert rows["perseus"]["time_us"] == 2.0 and rows["perseus"]["busbw_gbs"] == 2.0
    assert rows["perseus"]["rounds_time_us"] == [3.0, 1.0, 2.0]
    assert rows["openmpi"]["rounds_time_us"] == [9.0]

    class FakeRunner:
        def __init__(self):
            self.calls = []

        def run(self, what, library, cmd, keep=True, **kw):
            self.calls.append(library)
            return [{"library": library, "framework": "torch", "ranks": 2, "step_ms": 1.0}]

    r = FakeRunner()
    runs = [("a", "a", [], {}), ("b", "b", [], {}), ("c", "c", [], {})]
    got = run_all.interleaved(r, runs, 3)
    assert r.calls == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]  # no library always first
    assert len(got) == 3 and all(len(g) == 3 for g in got)


def test_allreduce_verdict_also_takes_each_library_at_its_fastest_round():
    rows = coll_rows()
    for r in rows:
        if r["library"] in ("perseus", "openmpi"):
            r["rounds_time_us"] = [r["time_us"]] * 3
    ahead = report.allreduce_verdict(rows)
    assert ahead["ok"] and "also with each library at its fastest round" in ahead["text"]
    # Open MPI slow in two rounds of three, fast in one: the median says ahead, its fastest
    # round says behind, and the verdict is not met.
    for r in rows:
        if r["library"] == "openmpi" and r["bytes"] == 1024:
            r["rounds_time_us"] = [r["time_us"], r["time_us"], 0.1]
    mixed = report.allreduce_verdict(rows)
    assert not mixed["ok"]
    assert "fastest round: behind at 1 KiB (openmpi" in mixed["text"], mixed["text"]
