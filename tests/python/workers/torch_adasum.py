"""op=hvd.Adasum against a direct evaluation of Horovod's formula: the binary tree
adasum(adasum(g0, g1), adasum(g2, g3)) of
    adasum(a, b) = (1 - a.b / (2|a|^2)) a + (1 - a.b / (2|b|^2)) b
(a coefficient stays 1 when its squared norm is below 1e-8), per tensor; and
DistributedOptimizer(op=Adasum)'s delta updates. argv[1] "refuse": the checks for a rank count
that is not a power of two; "cuda": CUDA tensors (the identity at one rank, host-staged over
more). Prints 'PASS <check>' per check."""

import sys

import torch

import perseus.torch as hvd
from checks import expect

TOLERANCE = {torch.float64: 1e-10, torch.float32: 1e-5, torch.float16: 2e-2}


def combine(a, b):
    dot, na, nb = (a * b).sum(), (a * a).sum(), (b * b).sum()
    ca = 1 - dot / na * 0.5 if na >= 1e-8 else 1.0
    cb = 1 - dot / nb * 0.5 if nb >= 1e-8 else 1.0
    return ca * a + cb * b


def adasum(vectors):
    level = [v.double() for v in vectors]
    while len(level) > 1:
        level = [combine(level[i], level[i + 1]) for i in range(0, len(level), 2)]
    return level[0]


def gradient(rank, shape, seed, zero_rank=None):
    """Rank `rank`'s tensor, of a scale that differs per rank (every rank can make any rank's)."""
    if rank == zero_rank:
        return torch.zeros(shape, dtype=torch.float64)
    g = torch.Generator().manual_seed(seed * 100 + rank)
    return torch.randn(shape, generator=g, dtype=torch.float64) * (1 + rank)


def _close(got, want, dtype, what):
    scale = max(1.0, want.abs().max().item())
    assert torch.allclose(got.double(), want, rtol=0, atol=TOLERANCE[dtype] * scale), (
        what, got.flatten()[:4], want.flatten()[:4])


def check_allreduce(rank, size):
    for dtype in (torch.float64, torch.float32, torch.float16):
        for seed, (shape, zero_rank) in enumerate([((5,), None), ((300, 7), None),
                                                   ((3, 4), 1)]):
            grads = [gradient(r, shape, seed, zero_rank).to(dtype) for r in range(size)]
            want = adasum(grads)
            got = hvd.allreduce(grads[rank], op=hvd.Adasum, name="adasum.%s.%d" % (dtype, seed))
            _close(got, want, dtype, ("allreduce", dtype, shape))
            t = grads[rank].clone()
            hvd.allreduce_(t, op=hvd.Adasum, name="adasum_.%s.%d" % (dtype, seed))
            _close(t, want, dtype, ("allreduce_", dtype, shape))
    # Scales apply before and after, as Horovod: 2 * adasum(0.5 * g).
    grads = [gradient(r, (64,), 7) for r in range(size)]
    got = hvd.allreduce(grads[rank], op=hvd.Adasum, prescale_factor=0.5, postscale_factor=2.0,
                        name="adasum.scaled")
    _close(got, 2.0 * adasum([0.5 * g for g in grads]), torch.float64, "scaled")
    # A name that Sum used often enough to be posted, then Adasum, then Sum again.
    for op in [hvd.Sum] * 4 + [hvd.Adasum] + [hvd.Sum] * 2:
        t = grads[rank].clone()
        hvd.allreduce_(t, op=op, name="adasum.reused")
        want = adasum(grads) if op == hvd.Adasum else sum(grads)
        _close(t, want, torch.float64, ("reused name", op))


def check_grouped_allreduce_combines_each_tensor_alone(rank, size):
    # Two tensors of very different scales: fused into one vector their coefficients would
    # mix; Horovod's are per tensor.
    a = [gradient(r, (40,), 11) * 1000 for r in range(size)]
    b = [gradient(r, (3, 3), 12) for r in range(size)]
    got_a, got_b = hvd.grouped_allreduce([a[rank], b[rank]], op=hvd.Adasum, name="adasum.grouped")
    _close(got_a, adasum(a), torch.float64, "grouped a")
    _close(got_b, adasum(b), torch.float64, "grouped b")


def check_refusals_of_any_size(rank, size):
    e = expect(RuntimeError, hvd.allreduce, torch.ones(4, dtype=torch.int32), op=hvd.Adasum,
               name="adasum.int")
    assert isinstance(e, hvd.HorovodInternalError) and "Adasum" in str(e), e
    e = expect(RuntimeError, hvd.reducescatter, torch.ones(size * 2), op=hvd.Adasum,
               name="adasum.rs")
    assert "Adasum" in str(e), e


def _model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(),
                               torch.nn.Linear(3, 2)).double()


def _batch(rank, step):
    g = torch.Generator().manual_seed(50 + 10 * rank + step)
    return torch.randn(6, 4, generator=g, dtype=torch.float64) * (1 + rank)


def check_optimizer_delta_updates(rank, size):
    # Each rank's SGD step is a delta from the same start; the ranks' deltas combine by Adasum
    # per parameter, and every rank lands on start + adasum(deltas).
    model = _model(3)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), op=hvd.Adasum)
    reference = _model(3)
    for step in range(2):
        opt.zero_grad()
        model(_batch(rank, step)).pow(2).sum().backward()
        opt.step()
        deltas = []
        for r in range(size):
            reference.zero_grad()
            reference(_batch(r, step)).pow(2).sum().backward()
            deltas.append([-0.1 * p.grad for p in reference.parameters()])
        with torch.no_grad():
            for i, p in enumerate(reference.parameters()):
                p.add_(adasum([d[i] for d in deltas]))
        for p, q in zip(model.parameters(), reference.parameters()):
            _close(p.detach(), q.detach(), torch.float64, ("optimizer step", step))
    expect(AssertionError, lambda: opt.skip_synchronize().__enter__())


def check_non_power_of_two_is_refused(rank, size):
    text = "Running Adasum with non-power of 2 ranks is not supported yet."
    for call in (lambda: hvd.allreduce(torch.ones(3), op=hvd.Adasum),
                 lambda: hvd.allreduce_(torch.ones(3), op=hvd.Adasum),
                 lambda: hvd.grouped_allreduce([torch.ones(3)], op=hvd.Adasum)):
        e = expect(NotImplementedError, call)
        assert str(e) == text, str(e)


def check_cuda_tensors(rank, size):
    dev = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
    for dtype in (torch.float32, torch.float16):
        grads = [gradient(r, (300, 7), 21).to(dtype) for r in range(size)]
        x = grads[rank].to(dev)
        got = hvd.allreduce(x, op=hvd.Adasum, name="adasum.cuda.%s" % dtype)
        assert got.is_cuda, got.device
        if size == 1:  # Horovod's Adasum of one rank's tensor is that tensor
            assert torch.equal(got, x), (got.flatten()[:4], x.flatten()[:4])
        else:
            _close(got.cpu(), adasum(grads), dtype, ("cuda", dtype))


def main():
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    if sys.argv[1:] == ["refuse"]:
        checks = [check_non_power_of_two_is_refused]
    elif sys.argv[1:] == ["cuda"]:
        checks = [check_cuda_tensors]
    else:
        checks = [check_allreduce, check_grouped_allreduce_combines_each_tensor_alone,
                  check_refusals_of_any_size, check_optimizer_delta_updates]
    for check in checks:
        check(rank, size)
        hvd.barrier()
        print("PASS", check.__name__, flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
