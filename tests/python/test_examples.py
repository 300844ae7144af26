"""The shipped examples run end to end on 2 ranks (shortened)."""

import os

import pytest

from perseus_test_support import REPO, run_worker

pytest.importorskip("torch")
pytestmark = pytest.mark.timeout(200)
EXAMPLES = REPO / "python" / "perseus" / "examples"


@pytest.mark.skipif(not os.path.isdir("/usr/share/datasets/fashion-mnist"),
                    reason="needs dataset-fashion-mnist")
def test_torch_mnist():
    out = run_worker(2, EXAMPLES / "torch_mnist.py", "--max-steps", "5",
                     "--test-samples", "200").stdout
    assert "[0]<stdout>:test accuracy:" in out and "images/s in total (2 ranks)" in out


def test_torch_synthetic_benchmark():
    out = run_worker(2, EXAMPLES / "torch_synthetic_benchmark.py", "--num-iters", "1",
                     "--num-batches-per-iter", "1", "--num-warmup-batches", "1",
                     "--image-size", "32", "--width", "8").stdout
    assert "Total img/sec on 2 rank(s)" in out
