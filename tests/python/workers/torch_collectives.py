"""Every perseus.torch collective, each dtype, on the global set and a process set.
Run by test_torch_collectives.py on 2 and 3 ranks."""

import sys
import time

import torch

import perseus.torch as hvd

# "quick": fewer dtypes and roots, for odd rank counts on small machines.
QUICK = "quick" in sys.argv[1:]

REDUCIBLE = [torch.uint8, torch.int8, torch.int32, torch.int64, torch.float16, torch.bfloat16,
             torch.float32, torch.float64]
if QUICK:
    REDUCIBLE = [torch.int32, torch.bfloat16, torch.float32]
ALL = REDUCIBLE + [torch.bool]


def value(r, dtype, shape=(5, 3)):
    if dtype == torch.bool:
        return torch.full(shape, r % 2 == 0, dtype=dtype)
    return torch.full(shape, r + 1, dtype=dtype)


def check_allreduce(rank, size):
    ranks = range(size)
    for dtype in REDUCIBLE:
        t = value(rank, dtype)
        total = sum(r + 1 for r in ranks)
        out = hvd.allreduce(t, op=hvd.Sum, name="sum.%s" % dtype)
        assert out.dtype == dtype and torch.equal(out, torch.full_like(t, total)), (dtype, out)
        assert torch.equal(hvd.allreduce(t, op=hvd.Min), torch.full_like(t, 1))
        assert torch.equal(hvd.allreduce(t, op=hvd.Max), torch.full_like(t, size))
        if dtype.is_floating_point:
            avg = hvd.allreduce(t)  # op=None: Average
            assert torch.allclose(avg.double(), torch.full((5, 3), total / size).double(),
                                  atol=1e-2), (dtype, avg)
            prod = 1
            for r in ranks:
                prod *= r + 1
            assert torch.allclose(hvd.allreduce(t, op=hvd.Product).double(),
                                  torch.full((5, 3), float(prod)).double())
            scaled = hvd.allreduce(t, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5)
            assert torch.allclose(scaled.double(), torch.full((5, 3), float(total)).double())
    b = hvd.allreduce(value(rank, torch.bool), op=hvd.Max)
    assert b.all()  # rank 0 contributes True: logical or
    b = hvd.allreduce(value(rank, torch.bool), op=hvd.Min)
    assert not b.any()  # rank 1 contributes False: logical and
    # in place, deprecated average=, non-contiguous in place
    t = torch.full((4,), float(rank))
    assert hvd.allreduce_(t, average=False) is t
    assert torch.equal(t, torch.full((4,), float(sum(ranks))))
    # A name used again and again: after its first runs allreduce_ and broadcast_ are posted
    # (Note [Posted collectives]) and finish inside one blocking call.
    for step in range(30):
        t = torch.full((4,), float(rank + step))
        assert hvd.allreduce_(t, op=hvd.Sum, name="again") is t
        assert torch.equal(t, torch.full((4,), float(sum(ranks) + size * step)))
        b = torch.full((3,), float(rank))
        assert hvd.broadcast_(b, size - 1, name="again.bc") is b
        assert torch.equal(b, torch.full((3,), float(size - 1)))
    # Named calls pass the tensor itself; what the extension cannot view through torch's DLPack
    # exchange API (not contiguous, a subclass) goes by address or the asynchronous path.
    for i, t in enumerate((torch.arange(12.0).reshape(3, 4).t(),
                           torch.nn.Parameter(torch.ones(3), False),
                           torch.ones(2, 3, dtype=torch.int64), torch.tensor(float(rank)),
                           torch.empty(0, 3))):
        expect = t.detach() * size if t.dim() else torch.tensor(float(sum(ranks)))
        assert hvd.allreduce_(t, op=hvd.Sum, name="view.%d" % i) is t
        assert torch.equal(t, expect), (t, expect)
        b = torch.full((2, 3), float(rank)).t()
        assert hvd.broadcast_(b, 0, name="view.bc") is b and torch.equal(b, torch.zeros(3, 2))
    call_forms(rank, size)
    late_posts(rank, size)
    nc = torch.arange(12.0).reshape(3, 4).t()
    assert not nc.is_contiguous()
    expect = nc * size
    hvd.allreduce_(nc, op=hvd.Sum)
    assert torch.equal(nc, expect)
    out = hvd.allreduce(torch.arange(12.0).reshape(3, 4).t(), op=hvd.Sum)
    assert torch.equal(out, torch.arange(12.0).reshape(3, 4).t() * size)
    # scalar and empty tensors
    assert hvd.allreduce(torch.tensor(float(rank)), op=hvd.Sum).item() == sum(ranks)
    assert hvd.allreduce(torch.empty(0, 3), op=hvd.Sum).shape == (0, 3)


def call_forms(rank, size):
    # allreduce, allreduce_, broadcast_ and allgather bind their arguments in C
    # (mpi_ops.fast_entry): every form of call their Python functions take, defaults included,
    # negotiated then posted.
    total = sum(r + 1 for r in range(size))
    for _ in range(4):
        t = torch.full((2,), float(rank + 1))
        assert hvd.allreduce_(t, None, "forms.ar", hvd.Sum, 2, 0.5, hvd.global_process_set) is t
        assert torch.equal(t, torch.full((2,), float(total)))
        t = torch.full((2,), float(rank + 1))
        assert hvd.allreduce_(tensor=t, name="forms.avg") is t  # op=None: Average
        assert torch.allclose(t, torch.full((2,), total / size))
        b = torch.full((2,), float(rank))
        assert hvd.broadcast_(b, root_rank=size - 1, name="forms.bc") is b
        assert torch.equal(b, torch.full((2,), float(size - 1)))
        assert hvd.allgather(torch.tensor([rank]), "forms.ag").tolist() == list(range(size))
        x = torch.full((3,), float(rank + 1))
        out = hvd.allreduce(x, None, "forms.out", hvd.Compression.none, hvd.Sum)
        assert out is not x and torch.equal(out, torch.full((3,), float(total)))
        assert torch.equal(x, torch.full((3,), float(rank + 1)))  # the input is untouched
        avg = hvd.allreduce(x, name="forms.out.avg", prescale_factor=2, postscale_factor=0.5)
        assert torch.allclose(avg, torch.full((3,), total / size))
        empty = hvd.allreduce(torch.empty(0, 2), name="forms.out.empty", op=hvd.Sum)
        assert empty.shape == (0, 2)


def late_posts(rank, size):
    # hvd.allreduce and hvd.allgather of a posted name make their result tensor after posting
    # their input; a rank that is late for the call leaves the others waiting past their watch,
    # on a handle, with the same results.
    for it in range(8):
        late = it >= 2 and rank == it % size
        if late:
            time.sleep(0.01)
        out = hvd.allreduce(torch.full((3,), float(rank + it)), name="late.ar", op=hvd.Sum)
        assert torch.equal(out, torch.full((3,), float(sum(r + it for r in range(size))))), out
        if late:
            time.sleep(0.01)
        out = hvd.allgather(torch.full((1, 2), float(rank + it)), name="late.ag")
        expect = torch.arange(it, it + size, dtype=torch.float32).repeat_interleave(2).view(-1, 2)
        assert torch.equal(out, expect), out


def check_grouped_allreduce(rank, size):
    ts = [torch.full((i + 1,), float(rank)) for i in range(4)] + [torch.ones(2, dtype=torch.int32)]
    outs = hvd.grouped_allreduce(ts, op=hvd.Sum)
    for t, o in zip(ts, outs):
        assert torch.equal(o, t.new_full(t.shape, sum(range(size)) if t.dtype.is_floating_point else size))
    h = hvd.grouped_allreduce_async_(ts[:2], op=hvd.Sum)
    res = hvd.synchronize(h)
    assert res[0] is ts[0] and ts[0].item() == sum(range(size))


def check_allgather(rank, size):
    for dtype in ALL + [torch.int16, torch.complex64]:
        t = torch.ones((rank + 1, 2), dtype=torch.float32).mul(rank).to(dtype)
        out = hvd.allgather(t, name="ag.%s" % dtype)
        expect = torch.cat([torch.ones((r + 1, 2)).mul(r).to(dtype) for r in range(size)])
        assert out.dtype == dtype and torch.equal(out, expect), (dtype, out)
    # A name that repeats goes the posted way after its first runs; ranks still differ in rows,
    # and may change them (that call is negotiated again). Results of posted calls of up to
    # 4 MiB of input per rank (posts by address above 64 KiB) are tensors the extension makes
    # and has written into; the first, negotiated runs of one name above 64 KiB are declined
    # to the handle path and share the library's memory.
    for rows in (1, 1, 1, 2, 2, 3):
        for cols in (2, 5000, 20000, 200000):
            base = torch.arange(rows * cols, dtype=torch.float32).view(rows, cols)
            t = base + rank if rank < size - 1 else torch.cat([base + rank] * 2)
            out = hvd.allgather(t, name="ag.repeat.%d" % cols)
            expect = torch.cat([base + r for r in range(size)] + [base + size - 1])
            assert torch.equal(out, expect), (rows, cols, out.shape)
    gather_small_results(rank, size)
    outs = hvd.grouped_allgather([torch.full((1,), rank), torch.full((2, 2), float(rank))])
    assert torch.equal(outs[0], torch.arange(size))
    assert outs[1].shape == (2 * size, 2)


def gather_small_results(rank, size):
    # A small result lives in memory the extension allocates and torch frees with the tensor:
    # aligned as torch's own, the caller's to write, freed on every call of a loop.
    t = torch.full((2, 3), float(rank))
    for _ in range(50):
        out = hvd.allgather(t, name="ag.small")
    assert out.data_ptr() % 64 == 0 and out.is_contiguous()
    out.add_(1)
    assert torch.equal(out, torch.cat([torch.full((2, 3), r + 1.0) for r in range(size)]))
    assert torch.equal(t, torch.full((2, 3), float(rank)))
    # A tensor that requires grad: the extension declines it, so the result has allgather's
    # gradient function; without grad mode it is gathered as any tensor.
    x = torch.full((1,), float(rank), requires_grad=True)
    assert hvd.allgather(x, name="ag.grad").grad_fn is not None
    with torch.no_grad():
        plain = hvd.allgather(x, name="ag.nograd")
    assert plain.grad_fn is None and torch.equal(plain, torch.arange(size, dtype=torch.float32))


def check_broadcast(rank, size):
    for root in ([size - 1] if QUICK else range(size)):
        for dtype in ALL + [torch.int16, torch.complex128]:
            t = torch.full((3, 2), float(rank + 1)).to(dtype)
            out = hvd.broadcast(t, root, name="bc.%d.%s" % (root, dtype))
            assert torch.equal(out, torch.full((3, 2), float(root + 1)).to(dtype)), (root, dtype)
            assert torch.equal(t, torch.full((3, 2), float(rank + 1)).to(dtype))  # untouched
        t = torch.full((2, 3), float(rank)).t()  # non-contiguous, in place
        assert hvd.broadcast_(t, root) is t
        assert torch.equal(t, torch.full((3, 2), float(root)))
        # Up to 64 KiB a repeated name is posted from its third call on; just over, negotiated.
        for n in (16384, 16385):
            for it in range(4):
                t = torch.arange(n, dtype=torch.float32) + rank + it
                hvd.broadcast_(t, root, name="bc.mid.%d.%d" % (root, n))
                assert torch.equal(t, torch.arange(n, dtype=torch.float32) + root + it), (n, it)


def check_alltoall(rank, size):
    # rank r sends (i + 1) rows to rank i
    splits = [i + 1 for i in range(size)]
    t = torch.cat([torch.full((i + 1, 2), float(rank * 10 + i)) for i in range(size)])
    out, received = hvd.alltoall(t, splits=splits)
    assert received.tolist() == [rank + 1] * size
    expect = torch.cat([torch.full((rank + 1, 2), float(r * 10 + rank)) for r in range(size)])
    assert torch.equal(out, expect)
    even = torch.arange(size * 2, dtype=torch.int64) + 100 * rank
    out = hvd.alltoall(even)  # no splits: the tensor alone, as Horovod returns it
    out_async, received = hvd.synchronize(hvd.alltoall_async(even))
    assert received.tolist() == [2] * size and torch.equal(out_async, out)
    assert out.tolist() == [100 * r + 2 * rank + k for r in range(size) for k in range(2)]
    out, _ = hvd.alltoall(torch.ones(size, dtype=torch.int16), splits=torch.ones(size))
    assert out.dtype == torch.int16 and out.tolist() == [1] * size


def check_reducescatter(rank, size):
    rows = 2 * size + 1  # uneven: the first rank gets one more row
    for dtype in [d for d in REDUCIBLE if d not in (torch.uint8, torch.int8)]:
        t = torch.arange(rows * 3).reshape(rows, 3).to(dtype)
        out = hvd.reducescatter(t, op=hvd.Sum, name="rs.%s" % dtype)
        start = sum(rows // size + (1 if r < rows % size else 0) for r in range(rank))
        n = rows // size + (1 if rank < rows % size else 0)
        assert torch.equal(out, (t[start:start + n] * size).to(dtype)), (dtype, out)
    avg = hvd.reducescatter(torch.ones(size * 2, 2))
    assert torch.equal(avg, torch.ones(2, 2))
    outs = hvd.grouped_reducescatter([torch.ones(size, 1), torch.ones(size * 2)], op=hvd.Sum)
    assert torch.equal(outs[0], torch.full((1, 1), float(size)))
    assert torch.equal(outs[1], torch.full((2,), float(size)))


def check_async_and_misc(rank, size):
    handles = [hvd.allreduce_async(torch.full((8,), float(i)), op=hvd.Sum, name="async.%d" % i)
               for i in range(5)]
    for i, h in enumerate(handles):
        out = hvd.synchronize(h)
        assert torch.equal(out, torch.full((8,), float(i * size)))
    h = hvd.broadcast_async(torch.tensor([rank]), 0)
    while not hvd.poll(h):
        pass
    assert hvd.synchronize(h).item() == 0
    hvd.barrier()
    assert hvd.broadcast_object({"rank": rank, "f": lambda x: x + 1}, root_rank=size - 1)["rank"] == size - 1
    assert hvd.allgather_object((rank, "x" * rank)) == [(r, "x" * r) for r in range(size)]


def check_unnamed_blocking(rank, size):
    # Unnamed blocking calls take one name per kind (perseus.common.names.blocking_name),
    # among unnamed asynchronous ops, whose names come from a counter, and with shapes that
    # change from call to call under the same name.
    total = sum(range(size))
    for it in range(6):
        h = hvd.allreduce_async(torch.full((2,), float(rank)), op=hvd.Sum)
        t = torch.full((1 + it % 3,), float(rank))
        assert hvd.allreduce_(t, op=hvd.Sum) is t and t.eq(total).all(), t
        assert hvd.allreduce(torch.full((4,), float(rank)), op=hvd.Max).eq(size - 1).all()
        b = torch.full((it + 1,), float(rank))
        assert hvd.broadcast_(b, root_rank=it % size) is b and b.eq(it % size).all(), b
        assert hvd.broadcast(torch.tensor([rank]), size - 1).item() == size - 1
        assert hvd.allgather(torch.tensor([rank] * (it % 2 + 1))).tolist() == [
            r for r in range(size) for _ in range(it % 2 + 1)]
        out = hvd.alltoall(torch.arange(size, dtype=torch.float32) + 10 * rank)
        assert out.tolist() == [10.0 * r + rank for r in range(size)], out
        out = hvd.reducescatter(torch.ones(size, 2), op=hvd.Sum)
        assert out.shape == (1, 2) and out.eq(size).all(), out
        assert hvd.synchronize(h).eq(total).all()
    # A gradient through an unnamed allreduce: the backward's allreduce is unnamed too.
    x = torch.ones(3, requires_grad=True)
    hvd.allreduce(x * (rank + 1), op=hvd.Sum).sum().backward()
    assert x.grad.eq(size * (rank + 1)).all(), x.grad
    if size % 2 == 0:
        halves = [hvd.add_process_set([r for r in range(size) if r % 2 == k]) for k in (0, 1)]
        for _ in range(3):
            t = torch.ones(2)
            hvd.allreduce_(t, op=hvd.Sum, process_set=halves[rank % 2])
            assert t.eq(size // 2).all(), t
        hvd.barrier()
        for half in halves:
            hvd.remove_process_set(half)


def check_process_sets(rank, size):
    evens = hvd.add_process_set([r for r in range(size) if r % 2 == 0])
    assert evens.included() == (rank % 2 == 0)
    if evens.included():
        out = hvd.allreduce(torch.ones(3), op=hvd.Sum, process_set=evens)
        assert torch.equal(out, torch.full((3,), float(evens.size())))
        assert hvd.allgather(torch.tensor([rank]), process_set=evens).tolist() == list(
            range(0, size, 2))
        got = hvd.broadcast(torch.tensor([rank]), 0, process_set=evens)
        assert got.item() == 0
        assert hvd.broadcast_object(rank, 0, process_set=evens) == 0
    hvd.barrier()
    assert hvd.remove_process_set(evens)
    assert not hvd.remove_process_set(hvd.global_process_set)


def check_join(rank, size):
    if rank == 0:
        out = hvd.allreduce(torch.ones(4), op=hvd.Sum, name="join.ar")
        assert torch.equal(out, torch.full((4,), 1.0))  # joined ranks contribute zeros
    last = hvd.join()
    assert 0 <= last < size


def main():
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    for name, fn in sorted(globals().items()):
        if name.startswith("check_"):
            fn(rank, size)
            print("PASS", name, flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
