"""Horovod's join with CUDA tensors (Note [Join on the GPU]): the joined rank takes part in the
NCCL (or host-staged) collectives the others still run, with zeros on its device. Needs a GPU;
ranks may share one. Prints 'PASS <check>' per check."""

import torch

import perseus.torch as hvd
from checks import run_checks


def _device():
    return hvd.local_rank() % torch.cuda.device_count()


def _others_run(rank, size, joined, tag):
    dev = torch.device("cuda", _device())
    live = size - 1
    # Several tensors in one fused response, of two dtypes, and one alone.
    outs = [hvd.allreduce_async(torch.full((n,), float(rank + 1), device=dev), op=hvd.Sum,
                                name="%s.ar%d" % (tag, n)) for n in (3, 1000, 70000)]
    want = float(sum(r + 1 for r in range(size) if r != joined))
    for h in outs:
        got = hvd.synchronize(h)
        assert got.is_cuda and torch.all(got == want), (got[:4], want)
    half = hvd.allreduce(torch.ones(5, device=dev, dtype=torch.float16), op=hvd.Sum,
                         name=tag + ".half")
    assert torch.all(half == live), half
    avg = hvd.allreduce(torch.full((4,), 2.0, device=dev), name=tag + ".avg")
    # Horovod averages over every rank, the joined one's zeros included.
    assert torch.allclose(avg, torch.full((4,), 2.0 * live / size, device=dev)), avg
    rows = rank + 1
    g = hvd.allgather(torch.full((rows, 2), float(rank), device=dev), name=tag + ".ag")
    assert g.shape == (sum(r + 1 for r in range(size) if r != joined), 2), g.shape
    root = next(r for r in reversed(range(size)) if r != joined)
    b = hvd.broadcast(torch.full((6,), float(rank), device=dev), root, name=tag + ".bc")
    assert torch.all(b == float(root)), b


def check_join_before_any_cuda_tensor(rank, size):
    # Rank 0 joins before it ever used the GPU, naming its device as Horovod's join(device).
    if rank == 0:
        last = hvd.join(device=_device())
    else:
        _others_run(rank, size, 0, "j0")
        last = hvd.join()
    assert last in range(1, size), last


def check_join_after_cuda_tensors(rank, size):
    # Now every rank used its GPU; the last rank joins with the default device.
    torch.cuda.set_device(_device())
    x = hvd.allreduce(torch.ones(2, device="cuda"), op=hvd.Sum, name="j1.warm")
    assert torch.all(x == size), x
    if rank == size - 1:
        last = hvd.join()
    else:
        _others_run(rank, size, size - 1, "j1")
        last = hvd.join()
    assert last in range(0, size - 1), last


def check_join_device_must_match(rank, size):
    if torch.cuda.device_count() < 2:
        return
    other = (_device() + 1) % torch.cuda.device_count()
    try:
        hvd.join(device=other)
    except ValueError as e:
        assert "device" in str(e), str(e)
    else:
        raise AssertionError("join(device=<another GPU>) was accepted")


def main():
    hvd.init()
    run_checks([check_join_before_any_cuda_tensor, check_join_after_cuda_tensors,
                check_join_device_must_match], hvd.rank(), hvd.size(), hvd.barrier)
    hvd.shutdown()


if __name__ == "__main__":
    main()
