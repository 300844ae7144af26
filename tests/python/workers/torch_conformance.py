"""Horovod 0.28 behaviours of perseus.torch that a program written for horovod.torch relies on
(issue: drop-in for Horovod). Runs on 2 or 3 ranks; prints 'PASS <check>' per check."""

import json
import os
import warnings

import torch

import perseus.torch as hvd
from checks import expect, run_checks


def check_launcher_env(rank, size):
    # As horovodrun: HOROVOD_* topology, and the torchrun names other libraries read.
    env = os.environ
    assert int(env["HOROVOD_RANK"]) == rank and int(env["HOROVOD_SIZE"]) == size
    assert int(env["HOROVOD_LOCAL_RANK"]) == hvd.local_rank()
    assert int(env["HOROVOD_LOCAL_SIZE"]) == hvd.local_size()
    assert int(env["HOROVOD_CROSS_RANK"]) == hvd.cross_rank()
    assert int(env["HOROVOD_CROSS_SIZE"]) == hvd.cross_size()
    assert env["HOROVOD_HOSTNAME"]
    assert int(env["RANK"]) == rank and int(env["WORLD_SIZE"]) == size
    assert int(env["LOCAL_RANK"]) == hvd.local_rank()


def check_import_paths(rank, size):
    import perseus.torch.horovod as aiacc_hvd
    assert aiacc_hvd is hvd
    assert aiacc_hvd.allreduce is hvd.allreduce


def check_global_root_rank(rank, size):
    # The set of ranks 1..size-1, rooted at the last rank: its global rank is not its index
    # in the set, which is what Horovod's root_rank names.
    members = list(range(1, size))
    root = size - 1
    ps = hvd.add_process_set(members)
    try:
        if rank in members:
            x = torch.full((3,), float(rank))
            assert torch.equal(hvd.broadcast(x, root, process_set=ps), torch.full((3,), root * 1.0))
            y = torch.full((3,), float(rank))
            hvd.broadcast_(y, root, process_set=ps)
            assert torch.equal(y, torch.full((3,), root * 1.0))
            h = hvd.broadcast_async(torch.full((2,), float(rank)), root, process_set=ps)
            assert torch.equal(hvd.synchronize(h), torch.full((2,), root * 1.0))
            z = torch.full((2,), float(rank))
            hvd.synchronize(hvd.broadcast_async_(z, root, process_set=ps))
            assert torch.equal(z, torch.full((2,), root * 1.0))
            # Autograd: the root gets the average gradient, the others zeros.
            w = torch.ones(2, requires_grad=True)
            hvd.broadcast(w * (rank + 1), root, process_set=ps).sum().backward()
            expected = (rank + 1) * 1.0 if rank == root else 0.0
            assert torch.allclose(w.grad, torch.full((2,), expected)), (rank, w.grad)
            obj = hvd.broadcast_object({"from": rank}, root_rank=root, process_set=ps)
            assert obj == {"from": root}, obj
            model = torch.nn.Linear(2, 2)
            with torch.no_grad():
                model.weight.fill_(rank)
            hvd.broadcast_parameters(model.state_dict(), root_rank=root, process_set=ps)
            assert torch.equal(model.weight, torch.full((2, 2), root * 1.0))
            opt = torch.optim.SGD(model.parameters(), lr=0.1 * (rank + 1), momentum=0.9)
            hvd.broadcast_optimizer_state(opt, root_rank=root, process_set=ps)
            assert abs(opt.param_groups[0]["lr"] - 0.1 * (root + 1)) < 1e-12
            # A root outside the set is an argument error naming the set.
            e = expect(ValueError, hvd.broadcast, torch.ones(1), 0, process_set=ps)
            assert "not a member" in str(e) and isinstance(e, hvd.HorovodInternalError)
    finally:
        hvd.remove_process_set(ps)


def _one_step_weight(rank, process_set):
    """The weight after one SGD step (lr 1) on the input rank+1, gradients averaged by a
    DistributedOptimizer over process_set."""
    model = torch.nn.Linear(3, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(1.0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0),
                                   named_parameters=model.named_parameters(),
                                   process_set=process_set)
    model(torch.full((1, 3), float(rank + 1))).sum().backward()
    opt.step()
    return model.weight.detach()


def check_optimizer_per_rank_process_sets(rank, size):
    # The even ranks train in one set, the odd ranks in another (Horovod's docs example).
    even = hvd.add_process_set(list(range(0, size, 2)))
    odd = hvd.add_process_set(list(range(1, size, 2)))
    mine = even if rank % 2 == 0 else odd
    try:
        avg = sum(r + 1 for r in mine.ranks) / len(mine.ranks)
        w = _one_step_weight(rank, mine)
        assert torch.allclose(w, torch.full((1, 3), 1.0 - avg)), (rank, w)
        # Every rank passing the even set: the odd ranks are outside it and train locally
        # (Horovod registers no hooks there), the even ones average within it.
        w = _one_step_weight(rank, even)
        if rank % 2 == 0:
            avg = sum(r + 1 for r in even.ranks) / len(even.ranks)
        else:
            avg = rank + 1.0
        assert torch.allclose(w, torch.full((1, 3), 1.0 - avg)), (rank, w)
    finally:
        hvd.remove_process_set(odd)
        hvd.remove_process_set(even)


def check_exception_types(rank, size):
    assert hvd.HorovodInternalError is hvd.PerseusInternalError
    assert issubclass(hvd.HorovodInternalError, RuntimeError)
    e = expect(RuntimeError, hvd.reducescatter, torch.ones(size), op=hvd.Adasum)
    assert isinstance(e, hvd.HorovodInternalError), type(e)
    e = expect(RuntimeError, hvd.allreduce, torch.ones(2, dtype=torch.complex64))
    assert isinstance(e, hvd.HorovodInternalError), type(e)
    # Argument errors of Horovod's Python layer stay ValueError.
    expect(ValueError, hvd.allreduce, torch.ones(2), average=True, op=hvd.Sum)


def check_alltoall_return_shapes(rank, size):
    x = torch.arange(size * 2, dtype=torch.float32)
    out = hvd.alltoall(x)
    assert torch.is_tensor(out) and out.shape == (size * 2,), type(out)
    out, received = hvd.alltoall(x, splits=[2] * size)
    assert torch.equal(received, torch.tensor([2] * size, dtype=torch.int32))
    # Autograd without splits: the gradient goes back through the same exchange.
    w = torch.ones(size * 2, requires_grad=True)
    hvd.alltoall(w * (rank + 1)).sum().backward()
    assert torch.allclose(w.grad, torch.full((size * 2,), rank + 1.0))
    out, received = hvd.synchronize(hvd.alltoall_async(x))  # the async form: both, as Horovod
    assert torch.is_tensor(received)


def check_broadcast_optimizer_state_fills_grads(rank, size):
    model = torch.nn.Linear(2, 2)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    assert all(p.grad is None for p in model.parameters())
    before = [p.detach().clone() for p in model.parameters()]
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    for p, b in zip(model.parameters(), before):
        assert p.grad is not None and torch.count_nonzero(p.grad) == 0
        assert torch.equal(p.detach(), b)  # a zero-gradient step moves nothing
        assert "momentum_buffer" in opt.state[p]


def check_build_queries(rank, size):
    flags = hvd.nccl_built()
    assert isinstance(flags, int) and not isinstance(flags, bool)
    assert (flags > 20000) if hvd.cuda_built() else flags == 0, flags
    # Ranks started by perseusrun without --mpi use no MPI.
    assert hvd.mpi_enabled() is False
    assert hvd.gloo_built() is False and hvd.gloo_enabled() is False
    assert hvd.ccl_built() is False and hvd.rocm_built() is False and hvd.ddl_built() is False
    assert hvd.mpi_threads_supported() is False


def check_warning_texts(rank, size):
    model = torch.nn.Linear(2, 1)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=[("warn." + n, p)
                                                     for n, p in model.named_parameters()])
    model(torch.ones(1, 2)).sum().backward()
    opt.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        opt.step()
    texts = [str(w.message) for w in caught]
    assert any(t.startswith("optimizer.step() called without optimizer.skip_synchronize() "
                            "context after optimizer.synchronize(). This can cause training "
                            "slowdown.") for t in texts), texts


def check_timeline(rank, size):
    d = os.environ["CONFORMANCE_TMP"]
    path = os.path.join(d, "timeline.json")
    hvd.start_timeline(path, mark_cycles=True)
    hvd.allreduce(torch.ones(4), name="timeline.tensor")
    hvd.stop_timeline()
    mine = path[:-len(".json")] + ".%d.json" % rank
    with open(mine) as f:
        events = json.load(f)
    names = [e.get("args", {}).get("name") for e in events if e.get("ph") == "M"]
    assert "timeline.tensor" in names, names
    assert any(e.get("name") == "CYCLE" for e in events)
    # After stop nothing more is written; a second start opens a fresh file.
    hvd.allreduce(torch.ones(4), name="timeline.after")
    with open(mine) as f:
        assert "timeline.after" not in f.read()
    e = expect(ValueError, hvd.start_timeline, "/nonexistent-dir/t.json")
    assert "/nonexistent-dir" in str(e)


def check_sparse(rank, size):
    # sparse_allreduce_async: every rank's entries, averaged.
    idx = torch.tensor([[rank, size]])
    t = torch.sparse_coo_tensor(idx, torch.tensor([1.0, float(rank)]), (size + 1,))
    handle = hvd.sparse_allreduce_async(t, name="sparse.t", op=hvd.Average)
    dense = handle().to_dense()
    expected = torch.zeros(size + 1)
    for r in range(size):
        expected[r] += 1.0 / size
        expected[size] += r / size
    assert torch.allclose(dense, expected), (dense, expected)
    # DistributedOptimizer on sparse embedding gradients, sparse_as_dense=False.
    emb = torch.nn.Embedding(4, 2, sparse=True)
    with torch.no_grad():
        emb.weight.fill_(1.0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(emb.parameters(), lr=1.0),
                                   named_parameters=[("emb.weight", emb.weight)])
    emb(torch.tensor([rank % 4])).sum().backward()
    assert emb.weight.grad.is_sparse
    opt.step()
    want = torch.ones(4, 2)
    for r in range(size):
        want[r % 4] -= 1.0 / size
    assert torch.allclose(emb.weight.detach(), want), (emb.weight, want)
    _check_sparse_as_dense(rank, size)


def _check_sparse_as_dense(rank, size):
    # SparseAdam over nn.Embedding(sparse=True) with sparse_as_dense=True: the densified
    # gradient is averaged and turned back to sparse before the step (SparseAdam refuses dense
    # gradients), as Horovod does; twice, so that the second step sees the first's state.
    torch.manual_seed(0)
    emb = torch.nn.Embedding(6, 3, sparse=True)
    reference = torch.nn.Embedding(6, 3, sparse=True)
    reference.load_state_dict(emb.state_dict())
    opt = hvd.DistributedOptimizer(torch.optim.SparseAdam(emb.parameters(), lr=0.1),
                                   named_parameters=[("dense.emb.weight", emb.weight)],
                                   sparse_as_dense=True)
    ref_opt = torch.optim.SparseAdam(reference.parameters(), lr=0.1)
    for step in range(2):
        rows = [[r % 6, (r + step + 1) % 6] for r in range(size)]
        opt.zero_grad()
        (emb(torch.tensor(rows[rank])) * (rank + 1)).sum().backward()
        opt.step()
        assert emb.weight.grad.is_sparse
        total = torch.zeros(6, 3)
        for r in range(size):
            reference.zero_grad()
            (reference(torch.tensor(rows[r])) * (r + 1)).sum().backward()
            total += reference.weight.grad.to_dense()
        reference.weight.grad = (total / size).to_sparse()
        ref_opt.step()
        assert torch.allclose(emb.weight.detach(), reference.weight.detach()), (
            step, emb.weight, reference.weight)


def check_grouped_autograd(rank, size):
    a = torch.ones(2, 3, requires_grad=True)
    b = torch.ones(rank + 1, requires_grad=True)
    ga, gb = hvd.grouped_allgather([a * (rank + 1), b * 2])
    assert ga.shape == (2 * size, 3) and gb.shape == (sum(r + 1 for r in range(size)),)
    (ga.sum() + gb.sum()).backward()
    # allgather's gradient: the average over ranks of the upstream gradient, this rank's rows.
    assert torch.allclose(a.grad, torch.full((2, 3), rank + 1.0))
    assert torch.allclose(b.grad, torch.full((rank + 1,), 2.0))
    c = torch.ones(size * 2, requires_grad=True)
    d = torch.ones(size, 2, requires_grad=True)
    rc, rd = hvd.grouped_reducescatter([c * (rank + 1), d], op=hvd.Sum)
    single_c = torch.ones(size * 2, requires_grad=True)
    hvd.reducescatter(single_c * (rank + 1), op=hvd.Sum).sum().backward()
    (rc.sum() + rd.sum()).backward()
    assert torch.allclose(c.grad, single_c.grad), (c.grad, single_c.grad)
    assert d.grad.shape == d.shape


def check_join(rank, size):
    # Rank 0 runs out of data first. The others still allreduce (rank 0 adds zeros), allgather
    # (rank 0 adds no rows) and broadcast from a rank that has not joined; alltoall refuses
    # with Horovod's text; join returns the last rank to join on every rank.
    if rank == 0:
        last = hvd.join()
    else:
        s = hvd.allreduce(torch.ones(3), op=hvd.Sum, name="join.ar")
        assert torch.equal(s, torch.full((3,), size - 1.0))
        g = hvd.allgather(torch.full((rank, 2), float(rank)), name="join.ag")
        assert g.shape == (sum(range(1, size)), 2), g.shape
        assert torch.equal(g[:, 0], torch.tensor([float(r) for r in range(1, size)
                                                  for _ in range(r)]))
        b = hvd.broadcast(torch.full((2,), float(rank)), size - 1, name="join.bc")
        assert torch.equal(b, torch.full((2,), size - 1.0))
        e = expect(RuntimeError, hvd.alltoall, torch.ones(size), name="join.a2a")
        assert "Alltoall is not supported with Join at this time." in str(e), str(e)
        assert isinstance(e, hvd.HorovodInternalError)
        e = expect(RuntimeError, hvd.broadcast, torch.ones(2), 0, name="join.bc0")
        assert "has joined" in str(e), str(e)
        last = hvd.join()
    assert last in range(1, size), last



# Every dtype Perseus reduces; int8/uint8 get smaller values so that sums over 3 ranks fit.
_JOIN_BASES = {torch.int8: [37, 35, -47], torch.uint8: [37, 35, 47]}
_JOIN_DTYPES = [torch.uint8, torch.int8, torch.int32, torch.int64, torch.float16,
                torch.bfloat16, torch.float32, torch.float64]


def _horovod_average(total, size):
    """Horovod's Average of a reduced `total`: Sum times a postscale of 1/size, computed in
    double and truncated toward zero for integers, in float32 for the 16-bit floats."""
    if not total.dtype.is_floating_point:
        return (total.double() * (1.0 / size)).trunc().to(total.dtype)
    wide = torch.float64 if total.dtype == torch.float64 else torch.float32
    return (total.to(wide) * torch.tensor(1.0 / size, dtype=wide)).to(total.dtype)


def check_join_average(rank, size):
    # One rank has joined and the others average: Horovod divides by the full set size (the
    # joined rank adds zeros), for every dtype and shape, whichever rank joined, alone or fused
    # with other tensors, on the first call of a name and on the cached calls after it.
    shapes = [(3,), (2, 3), (64, 33), (300, 1000)]
    for joined in range(size):
        if rank != joined:
            for _ in range(3):
                handles = []
                for dtype in _JOIN_DTYPES:
                    base = torch.tensor(_JOIN_BASES.get(dtype, [75, 71, -94]), dtype=dtype)
                    for shape in shapes:
                        n = 1
                        for d in shape:
                            n *= d
                        t = base.repeat(n // 3 + 1)[:n].reshape(shape)
                        name = "join.avg.%d.%s.%s" % (joined, dtype, "x".join(map(str, shape)))
                        want = _horovod_average(t * (size - 1), size)
                        handles.append((hvd.allreduce_async(t, op=hvd.Average, name=name), want))
                for h, want in handles:
                    got = hvd.synchronize(h)
                    assert got.dtype == want.dtype and torch.equal(got, want), (
                        joined, want.dtype, want.shape, got.flatten()[:3], want.flatten()[:3])
            if size == 2:  # the numbers: truncating division, as torch's 'trunc'
                got = hvd.allreduce(torch.tensor([[75, 71, -94]]), op=hvd.Average,
                                    name="join.avg.example")
                assert got.tolist() == [[37, 35, -47]], got
        last = hvd.join()
        assert last != joined and 0 <= last < size, (joined, last)


CHECKS = [check_launcher_env, check_import_paths, check_global_root_rank,
          check_optimizer_per_rank_process_sets, check_exception_types,
          check_alltoall_return_shapes, check_broadcast_optimizer_state_fills_grads,
          check_build_queries, check_warning_texts, check_timeline, check_sparse,
          check_grouped_autograd, check_join, check_join_average]


def main():
    expect(ValueError, hvd.start_timeline, "x.json")  # before init, as Horovod
    hvd.init()
    run_checks(CHECKS, hvd.rank(), hvd.size(), hvd.barrier)


if __name__ == "__main__":
    main()
