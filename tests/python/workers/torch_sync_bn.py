"""SyncBatchNorm with unequal (and empty) per-rank batches equals BatchNorm on the full batch:
outputs, input gradients, weight/bias gradients (summed over ranks) and running stats."""

import torch

import perseus.torch as hvd


def run(shape_tail, counts, bn_cls):
    rank, size = hvd.rank(), hvd.size()
    c = 3
    g = torch.Generator().manual_seed(11)
    full = torch.randn(sum(counts), c, *shape_tail, generator=g, dtype=torch.float64) * 3 + 1
    gy = torch.randn(full.shape, generator=g, dtype=torch.float64)
    start = sum(counts[:rank])
    local = full[start:start + counts[rank]].clone().requires_grad_(True)

    ref = bn_cls(c).double()
    sync = hvd.SyncBatchNorm(c).double()
    with torch.no_grad():
        ref.weight.copy_(torch.tensor([1.0, 2.0, 0.5]))
        ref.bias.copy_(torch.tensor([0.1, -0.2, 0.3]))
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
    assert torch.allclose(out, ref_out[sl], atol=1e-10), (out - ref_out[sl]).abs().max()
    assert torch.allclose(local.grad, ref_in.grad[sl], atol=1e-10)
    gw = hvd.allreduce(sync.weight.grad, op=hvd.Sum)
    gb = hvd.allreduce(sync.bias.grad, op=hvd.Sum)
    assert torch.allclose(gw, ref.weight.grad, atol=1e-10), (gw, ref.weight.grad)
    assert torch.allclose(gb, ref.bias.grad, atol=1e-10)
    assert torch.allclose(sync.running_mean, ref.running_mean, atol=1e-12)
    assert torch.allclose(sync.running_var, ref.running_var, atol=1e-12)
    sync.eval()
    ref.eval()
    assert torch.allclose(sync(local.detach()), ref(full)[sl], atol=1e-10)


def main():
    hvd.init()
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
