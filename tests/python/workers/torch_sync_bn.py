"""SyncBatchNorm with unequal (and empty) per-rank batches equals BatchNorm on the full batch:
outputs, input gradients, weight/bias gradients (summed over ranks) and running stats.
Argument "cuda": the same on CUDA tensors (torch's fused batch-norm kernels, the statistics
allreduces ordered on the stream), every rank on the GPU of its local rank."""

import sys

import torch

import perseus.torch as hvd


DEVICE = torch.device("cpu")
# float64 on both; the fused CUDA kernels take another route to the same moments.
ATOL = 1e-10


def run(shape_tail, counts, bn_cls):
    rank, size = hvd.rank(), hvd.size()
    c = 3
    g = torch.Generator().manual_seed(11)
    full = torch.randn(sum(counts), c, *shape_tail, generator=g, dtype=torch.float64) * 3 + 1
    gy = torch.randn(full.shape, generator=g, dtype=torch.float64)
    start = sum(counts[:rank])
    full, gy = full.to(DEVICE), gy.to(DEVICE)
    local = full[start:start + counts[rank]].clone().requires_grad_(True)

    ref = bn_cls(c).double().to(DEVICE)
    sync = hvd.SyncBatchNorm(c).double().to(DEVICE)
    with torch.no_grad():
        ref.weight.copy_(torch.tensor([1.0, 2.0, 0.5], device=DEVICE))
        ref.bias.copy_(torch.tensor([0.1, -0.2, 0.3], device=DEVICE))
        sync.weight.copy_(ref.weight)
        sync.bias.copy_(ref.bias)
    ref_in = full.clone().requires_grad_(True)
    for _ in range(2):  # two steps: running stats accumulate
        ref_in.grad = None
        local.grad = None
        ref.zero_grad()
        sync.zero_grad()
        ref_out = ref(ref_in)
        ref_out.backward(gy)
        out = sync(local)
        out.backward(gy[start:start + counts[rank]])
    sl = slice(start, start + counts[rank])
    assert torch.allclose(out, ref_out[sl], atol=ATOL), (out - ref_out[sl]).abs().max()
    assert torch.allclose(local.grad, ref_in.grad[sl], atol=ATOL)
    gw = hvd.allreduce(sync.weight.grad, op=hvd.Sum)
    gb = hvd.allreduce(sync.bias.grad, op=hvd.Sum)
    assert torch.allclose(gw, ref.weight.grad, atol=ATOL), (gw, ref.weight.grad)
    assert torch.allclose(gb, ref.bias.grad, atol=ATOL)
    assert torch.allclose(sync.running_mean, ref.running_mean, atol=ATOL / 100)
    assert torch.allclose(sync.running_var, ref.running_var, atol=ATOL / 100)
    sync.eval()
    ref.eval()
    assert torch.allclose(sync(local.detach()), ref(full)[sl], atol=ATOL)


def main():
    global DEVICE, ATOL
    hvd.init()
    if sys.argv[1:] == ["cuda"]:
        DEVICE = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
        torch.cuda.set_device(DEVICE)
        ATOL = 1e-8
    size = hvd.size()
    counts = {2: [3, 5], 3: [2, 0, 4]}[size]
    run((4,), counts, torch.nn.BatchNorm1d)
    print("PASS sync_bn 3d", flush=True)
    run((2, 3), counts, torch.nn.BatchNorm2d)
    print("PASS sync_bn 4d", flush=True)
    run((), [c + 1 for c in counts], torch.nn.BatchNorm1d)
    print("PASS sync_bn 2d", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
