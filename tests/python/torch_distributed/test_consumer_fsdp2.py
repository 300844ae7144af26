"""FSDP2 (`fully_shard`) on the perseus backend: at 2 ranks over a 1-D mesh, and HSDP over a
2x2 DeviceMesh at 4 ranks; the same losses, full weights and shard shapes as on Gloo, from the
same start and data (examples/fsdp2_training.py)."""
import pytest

from consumer_support import assert_close, compare_backends

pytest.importorskip("torch")
pytestmark = pytest.mark.timeout(240)


def test_fsdp2_matches_gloo():
    reference, tested = compare_backends(2, "fsdp2_training.py", "--steps", "4")
    assert tested[0]["mesh"] == [2]
    assert_close(reference, tested, 1e-5, "fsdp2")


def test_hsdp_2x2_mesh_matches_gloo():
    reference, tested = compare_backends(4, "fsdp2_training.py", "--mesh", "2x2", "--steps", "3",
                                         timeout=200)
    assert tested[0]["mesh"] == [2, 2]
    assert_close(reference, tested, 1e-5, "hsdp")
