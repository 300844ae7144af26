"""bench/torch_distributed/make_report.py's verdicts: met, missed, and missed where the floor
(row `local`) misses the bar in the same run.

    python -m pytest bench/tests -q
"""
import os
import sys

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(BENCH, "torch_distributed"))

import make_report  # noqa: E402


def ddp_rows(perseus, local, gloo=100.0):
    common = {"bench": "ddp", "ranks": 2, "model": "m", "tensors": 1, "params": 1, "step_ms": 1.0}
    return [dict(common, library=lib, samples_per_s=s)
            for lib, s in (("perseus", perseus), ("gloo", gloo), ("local", local))]


def perseus_line(rows):
    return next(line for line in make_report.ddp_table(rows) if "| perseus |" in line)


def test_met_missed_and_out_of_reach():
    assert "(bar >= 1.4x: met)" in perseus_line(ddp_rows(150.0, 170.0))
    assert "(bar >= 1.4x: NOT met)" in perseus_line(ddp_rows(120.0, 170.0))
    assert "NOT met; out of reach in this run, the floor is 1.39x" in perseus_line(
        ddp_rows(123.0, 139.0))


def test_fsdp_bar_is_an_upper_bound():
    common = {"bench": "fsdp2", "ranks": 2, "model": "m", "params": 1, "batch_per_rank": 8}
    rows = [dict(common, library=lib, step_ms=t)
            for lib, t in (("perseus", 55.0), ("gloo", 100.0), ("local", 52.0))]
    line = next(x for x in make_report.fsdp_table(rows) if "| perseus |" in x)
    assert "NOT met; out of reach in this run, the floor is 0.52x" in line
