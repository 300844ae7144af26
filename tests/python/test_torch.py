"""perseus.torch on real ranks started by perseusrun (workers/ hold the per-rank code)."""

import os
import pytest

from perseus_test_support import run_worker

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.timeout(200)


def test_collectives_2_ranks():
    out = run_worker(2, "torch_collectives.py").stdout
    assert out.count("PASS check_") == 2 * 10


def test_collectives_3_ranks():
    out = run_worker(3, "torch_collectives.py", "quick").stdout
    assert out.count("PASS check_") == 3 * 10


def test_errors_raise_and_never_hang():
    assert run_worker(2, "torch_errors.py").stdout.count("PASS errors") == 2


def test_autograd():
    assert run_worker(2, "torch_autograd.py").stdout.count("PASS autograd") == 2


def test_distributed_optimizer_matches_single_process():
    assert run_worker(2, "torch_train.py").stdout.count("PASS train") == 2


@pytest.mark.parametrize("np", [2, 3])
def test_sync_batch_norm_matches_batch_norm(np):
    assert run_worker(np, "torch_sync_bn.py").stdout.count("PASS sync_bn") == 3 * np


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU (the device check runs it)")
def test_sync_batch_norm_matches_batch_norm_on_cuda():
    assert run_worker(2, "torch_sync_bn.py", "cuda").stdout.count("PASS sync_bn") == 3 * 2


def test_engine_stats_show_cached_negotiation():
    env = dict(os.environ, PERSEUS_POSTED_ALLREDUCE="0")
    assert run_worker(2, "torch_engine_stats.py", env=env).stdout.count("PASS engine_stats") == 2


def test_engine_stats_show_posted_allreduces():
    assert run_worker(2, "torch_engine_stats.py").stdout.count("PASS engine_stats") == 2


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU (the device check runs it)")
def test_join_with_cuda_tensors():
    assert run_worker(2, "torch_cuda_join.py").stdout.count("PASS check_") == 2 * 3


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU (the device check runs it)")
@pytest.mark.parametrize("np", [1, 2])
def test_scaling_gives_horovods_bits_on_cuda(np):
    assert run_worker(np, "torch_scaling.py", "cuda").stdout.count("PASS check_") == np * 2


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU (the device check runs it)")
def test_alltoall_received_splits_stay_on_the_gpu():
    assert run_worker(2, "torch_cuda_alltoall.py").stdout.count("PASS check_") == 2


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU (the device check runs it)")
@pytest.mark.parametrize("np", [1, 2])
def test_adasum_on_cuda_tensors(np):
    assert run_worker(np, "torch_adasum.py", "cuda").stdout.count("PASS check_") == np
