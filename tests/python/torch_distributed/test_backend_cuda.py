"""CUDA tensors on the perseus backend (world size 1; skipped without a GPU): the ops,
Work.wait() that orders the current stream after the collective without blocking the host, and
a DDP step (plain and with the fp16 comm hook)."""
import pytest
import torch

from distsupport import ok, perseusrun

pytestmark = [pytest.mark.timeout(200),
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def test_cuda_ops_and_stream_semantics():
    r, out = perseusrun(1, "cuda", timeout=180)
    ok(r, out, "CUDA OK", 1)


def test_cuda_ddp_step():
    r, out = perseusrun(1, "cuda_ddp", timeout=180)
    ok(r, out, "CUDA DDP OK", 1)
