"""torch.compile(fullgraph=True) over dist.all_reduce, funcol.all_reduce and
all_gather_into_tensor on the perseus backend (examples/compile_collectives.py): one graph,
no graph break (torch._dynamo.explain), and compiled results equal to eager ones, as on Gloo.
aot_eager, except in one inductor test: an inductor compile costs tens of seconds per rank on a
small CI machine."""
import json
from pathlib import Path

import pytest

from consumer_support import EXAMPLES, compare_backends, torchrun

WORKERS = Path(__file__).resolve().parent / "workers"

pytest.importorskip("torch")
pytestmark = pytest.mark.timeout(260)


def test_compiled_collectives_have_no_graph_break():
    reference, tested = compare_backends(2, "compile_collectives.py", "--compiler", "aot_eager",
                                         timeout=200)
    assert [r["what"] for r in tested] == ["collectives", "model"]
    for record in tested:
        assert record["graph_breaks"] == 0, record["break_reasons"]
        assert record["graphs"] == 1, record
        assert record["compiled_equals_eager"] == [True, True], record
    assert tested == reference


def test_inductor_compile_of_collectives():
    """The one inductor compile of the suite: the function that calls dist.all_reduce, on the
    perseus backend alone."""
    out = torchrun(2, WORKERS / "compile_inductor.py", EXAMPLES / "compile_collectives.py",
                   timeout=220).stdout
    record = json.loads(next(line for line in out.splitlines() if line.startswith("{")))
    assert record["graph_breaks"] == 0, record["break_reasons"]
    assert record["graphs"] == 1, record
    assert record["compiled_equals_eager"] == [True, True], record
