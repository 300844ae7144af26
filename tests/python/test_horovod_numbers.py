"""perseus.torch gives Horovod's numbers on CPU tensors: the bits of prescale/postscale, and
Adasum against a direct evaluation of its formula (workers/torch_scaling.py, torch_adasum.py).
Their CUDA counterparts are in test_torch.py, which the device check runs."""

import pytest

from perseus_test_support import run_worker

pytest.importorskip("torch")
pytestmark = pytest.mark.timeout(200)


def test_scaling_gives_horovods_bits_on_cpu():
    assert run_worker(2, "torch_scaling.py", "cpu").stdout.count("PASS check_") == 2 * 2


@pytest.mark.parametrize("np", [2, 4])
def test_adasum_matches_horovods_formula(np):
    assert run_worker(np, "torch_adasum.py").stdout.count("PASS check_") == np * 4


def test_adasum_refuses_a_rank_count_that_is_not_a_power_of_two():
    assert run_worker(3, "torch_adasum.py", "refuse").stdout.count("PASS check_") == 3
