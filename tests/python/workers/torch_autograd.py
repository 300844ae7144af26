"""Gradients of the autograd collectives, as Horovod defines them. Run on 2 ranks."""

import torch

import perseus.torch as hvd


def main():
    hvd.init()
    rank, size = hvd.rank(), hvd.size()

    for op, expect in ((hvd.Sum, float(size)), (hvd.Average, 1.0)):
        x = torch.randn(4, 3, requires_grad=True)
        hvd.allreduce(x, op=op).backward(torch.ones(4, 3))
        assert torch.allclose(x.grad, torch.full((4, 3), expect)), (op, x.grad)

    xs = [torch.randn(2, requires_grad=True), torch.randn(3, requires_grad=True)]
    outs = hvd.grouped_allreduce(xs, op=hvd.Sum)
    sum(o.sum() for o in outs).backward()
    assert all(torch.equal(x.grad, torch.full_like(x, float(size))) for x in xs)

    x = torch.randn(rank + 1, 3, requires_grad=True)
    gathered = hvd.allgather(x)
    grad = torch.cat([torch.ones(r + 1, 3) * r for r in range(size)])
    gathered.backward(grad)
    assert torch.equal(x.grad, torch.ones(rank + 1, 3) * rank), x.grad

    x = torch.randn(5, requires_grad=True)
    hvd.broadcast(x, root_rank=0).backward(torch.ones(5))
    assert torch.equal(x.grad, torch.ones(5) * (1.0 if rank == 0 else 0.0)), x.grad

    x = torch.randn(size * 2, 3, requires_grad=True)
    out = hvd.alltoall(x)  # no splits: the tensor alone, as Horovod returns it
    assert out.shape == (size * 2, 3)
    out.backward(torch.ones_like(out))
    assert torch.equal(x.grad, torch.ones(size * 2, 3))

    for op, expect in ((hvd.Sum, float(size)), (hvd.Average, 1.0)):
        x = torch.randn(size * 4, 3, requires_grad=True)
        hvd.reducescatter(x, op=op).backward(torch.ones(4, 3))
        assert torch.allclose(x.grad, torch.full((size * 4, 3), expect)), (op, x.grad)

    x = torch.randn(6, requires_grad=True)
    y = hvd.allreduce(x, op=hvd.Sum, compression=hvd.Compression.fp16)
    assert y.dtype == torch.float32
    y.backward(torch.ones(6))
    assert torch.equal(x.grad, torch.full((6,), float(size)))
    hvd.shutdown()
    print("PASS autograd", flush=True)


if __name__ == "__main__":
    main()
