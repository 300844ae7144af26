"""all_gather_object, broadcast_object_list, gather_object and scatter_object_list on the
perseus backend: every rank receives exactly what Gloo gives it
(examples/object_collectives.py)."""
import pytest

from consumer_support import compare_backends

pytest.importorskip("torch")
pytestmark = pytest.mark.timeout(200)


def test_object_collectives_match_gloo():
    reference, tested = compare_backends(2, "object_collectives.py")
    assert tested == reference
    per_rank = tested[0]["per_rank"]
    assert [g["rank"] for g in per_rank[1]["all_gather_object"]] == [0, 1]
    assert per_rank[0]["broadcast_object_list"][1] == "from-1"
