"""One rank of a torch.distributed job on the perseus backend. Each argument is a check to run,
in order, each with its own init_process_group and destroy_process_group: `name` or
`name@method`, the method being env, perseus, store or a tcp:// address (env by default)."""
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

import perseus.torch  # noqa: F401  (registers "perseus")
from perseus.torch.distributed import prefer_process_group, process_group_route

R = dist.ReduceOp
DTYPES = [torch.float32, torch.float64, torch.int32, torch.bfloat16]


def init(method="env", timeout_s=60, backend="perseus"):
    timeout = datetime.timedelta(seconds=timeout_s)
    if method == "env":
        dist.init_process_group(backend, timeout=timeout)
    elif method == "perseus":
        dist.init_process_group(backend, init_method="perseus://", timeout=timeout)
    elif method == "store":
        rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), size,
                              rank == 0, timeout=timeout)
        dist.init_process_group(backend, store=store, rank=rank, world_size=size,
                                timeout=timeout)
    else:  # tcp://host:port
        dist.init_process_group(backend, init_method=method, rank=int(os.environ["RANK"]),
                                world_size=int(os.environ["WORLD_SIZE"]), timeout=timeout)
    return dist.get_rank(), dist.get_world_size()


def same(got, want, what):
    if not torch.equal(got, want.to(got.dtype)):
        raise AssertionError("%s: got %s, want %s" % (what, got.tolist(), want.tolist()))


def value(rank, dtype, n=4):
    return (torch.arange(n) + rank + 1).to(dtype)


def check_allreduce(rank, size):
    vals = [value(r, torch.float64) for r in range(size)]
    want = {R.SUM: sum(vals), R.MIN: torch.stack(vals).min(0).values,
            R.MAX: torch.stack(vals).max(0).values, R.PRODUCT: torch.stack(vals).prod(0)}
    for dtype in DTYPES:
        for op, expect in want.items():
            t = value(rank, dtype)
            dist.all_reduce(t, op=op)
            same(t, expect, "all_reduce %s %s" % (op, dtype))
        if dtype.is_floating_point:
            t = value(rank, dtype)
            dist.all_reduce(t, op=R.AVG)
            same(t, want[R.SUM] / size, "all_reduce AVG %s" % dtype)
            t = value(rank, dtype)
            dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5))
            same(t, want[R.SUM] * 0.5, "all_reduce PREMUL_SUM %s" % dtype)
    t = value(rank, torch.float32, 6)[::2]  # strided
    dist.all_reduce(t)
    same(t, sum(value(r, torch.float64, 6)[::2] for r in range(size)), "strided all_reduce")
    ts = [value(rank, torch.float32), value(rank, torch.float32, 3)]
    dist.all_reduce_coalesced(ts)
    same(ts[1], sum(value(r, torch.float32, 3) for r in range(size)), "all_reduce_coalesced")
    work = dist.all_reduce(value(rank, torch.float32), async_op=True)
    got = work.get_future().then(lambda f: f.value()[0] * 2).wait()
    same(got, want[R.SUM] * 2, "future .then()")
    assert work.get_future().done()  # Note [is_completed] in _work.py
    if process_group_route():  # the caller holds the PerseusWork itself there
        work = dist.all_reduce(value(rank, torch.float32), async_op=True)
        work.wait()
        assert work.is_completed() and work.is_success()


def check_blocking_entry(rank, size):
    """The blocking allreduce's C entry (dist_allreduce) and the Python path it leaves calls to
    number a signature's names alike: ranks taking different paths for the same call still
    pair. Then a name whose last use is still in flight: rank 1 submits late, so rank 0's
    65th call of a signature meets its first name unfinished and waits its turn."""
    total = sum(range(1, size + 1))
    for i in range(6):
        t = torch.full((5,), float(rank + 1))
        if (i + rank) % 2:  # a subclass the entry leaves to the Python path
            t = torch.nn.Parameter(t, requires_grad=False)
        dist.all_reduce(t)
        same(t, torch.full((5,), float(total)), "blocking all_reduce %d" % i)
        bad = torch.full((6,), 1.0)[::2]  # strided: left to the asynchronous path
        dist.all_reduce(bad, op=R.MAX)
        same(bad, torch.ones(3), "strided blocking all_reduce %d" % i)
    if rank == 1:
        time.sleep(0.3)
    pending = [torch.full((7,), float(rank)) for _ in range(64)]
    works = [dist.all_reduce(t, async_op=True) for t in pending]
    t = torch.full((7,), float(rank + 1))
    dist.all_reduce(t)
    same(t, torch.full((7,), float(total)), "blocking all_reduce behind 64 in flight")
    for w, p in zip(works, pending):
        w.wait()
        same(p, torch.full((7,), float(sum(range(size)))), "in-flight all_reduce")


def check_movement(rank, size):
    for dtype in DTYPES + [torch.int16]:
        t = value(rank, dtype)
        dist.broadcast(t, src=size - 1)
        same(t, value(size - 1, dtype), "broadcast %s" % dtype)
        outs = [torch.zeros(4, dtype=dtype) for _ in range(size)]
        dist.all_gather(outs, value(rank, dtype))
        for r in range(size):
            same(outs[r], value(r, dtype), "all_gather %s" % dtype)
        out = torch.zeros(size * 4, dtype=dtype)
        dist.all_gather_into_tensor(out, value(rank, dtype))
        same(out, torch.cat([value(r, dtype) for r in range(size)]), "all_gather_into_tensor")
    # Gathered by the engine straight into the output (Note [Allgather into]): a repeated small
    # one (the post lane's), a large one, and a 2-D one.
    for n in (4, 4, 4, 4, 1 << 18):
        out = torch.full((size * n,), -1.0)
        dist.all_gather_into_tensor(out, torch.arange(n, dtype=torch.float32) + 1000 * rank)
        same(out, torch.cat([torch.arange(n, dtype=torch.float32) + 1000 * r
                             for r in range(size)]), "all_gather_into_tensor of %d" % n)
    out = torch.zeros(size * 2, 3, dtype=torch.int64)
    dist.all_gather_into_tensor(out, torch.full((2, 3), rank, dtype=torch.int64))
    same(out, torch.arange(size).repeat_interleave(6).view(size * 2, 3), "2-D all_gather_into")
    t = value(rank, torch.float32)
    dist.reduce(t, dst=0, op=R.MAX)
    if rank == 0:
        same(t, value(size - 1, torch.float32), "reduce MAX")
    else:
        same(t, value(rank, torch.float32), "reduce keeps a non-root's input")
    with dist._coalescing_manager(async_ops=True) as cm:
        outs = [torch.zeros(size * 2) for _ in range(2)]
        for o in outs:
            dist.all_gather_into_tensor(o, value(rank, torch.float32, 2))
    cm.wait()
    same(outs[1], torch.cat([value(r, torch.float32, 2) for r in range(size)]),
         "coalesced all_gather_into_tensor")


def check_reduce_scatter(rank, size):
    for op in (R.SUM, R.AVG, R.MAX):
        full = [value(r, torch.float32, 2 * size) for r in range(size)]
        expect = {R.SUM: sum(full), R.AVG: sum(full) / size,
                  R.MAX: torch.stack(full).max(0).values}[op]
        out = torch.zeros(2)
        dist.reduce_scatter_tensor(out, value(rank, torch.float32, 2 * size), op=op)
        same(out, expect[2 * rank:2 * rank + 2], "reduce_scatter_tensor %s" % op)
        out = torch.zeros(2)
        dist.reduce_scatter(out, list(value(rank, torch.float32, 2 * size).chunk(size)), op=op)
        same(out, expect[2 * rank:2 * rank + 2], "reduce_scatter %s" % op)
    # Reduced by the engine straight into the output (Note [Allgather into]): repeated small
    # ones (the post lane's), a large one, and a non-contiguous output (the copying path).
    for n in (3, 3, 3, 3, 1 << 16):
        out = torch.full((n,), -7.0)
        dist.reduce_scatter_tensor(out, torch.arange(size * n, dtype=torch.float32) + rank)
        full = sum(torch.arange(size * n, dtype=torch.float32) + r for r in range(size))
        same(out, full[rank * n:(rank + 1) * n], "reduce_scatter_tensor of %d" % n)
    # FSDP2's gradients: AVG of megabyte blocks, reduced into the output and then scaled.
    n = (1 << 17) + 5
    out = torch.full((n,), -7.0)
    dist.reduce_scatter_tensor(out, torch.arange(size * n, dtype=torch.float32) * (rank + 1),
                               op=R.AVG)
    want = (torch.arange(size * n, dtype=torch.float32) * sum(range(1, size + 1)) / size)
    want = want[rank * n:(rank + 1) * n]
    if not torch.allclose(out, want, rtol=1e-6, atol=0):  # AVG scales by 1 / size: rounding
        raise AssertionError("reduce_scatter_tensor AVG of %d: got %s, want %s"
                             % (n, out[:8].tolist(), want[:8].tolist()))
    out = torch.zeros(2, 4)[:, 1]
    dist.reduce_scatter_tensor(out, value(rank, torch.float32, 2 * size))
    same(out, sum(value(r, torch.float32, 2 * size) for r in range(size))[2 * rank:2 * rank + 2],
         "reduce_scatter_tensor into a strided output")
    outs = [torch.zeros(2), torch.zeros(1)]
    with dist._coalescing_manager(async_ops=True) as cm:
        dist.reduce_scatter_tensor(outs[0], value(rank, torch.float32, 2 * size))
        dist.reduce_scatter_tensor(outs[1], value(rank, torch.float32, size))
    cm.wait()
    same(outs[1], sum(value(r, torch.float32, size) for r in range(size))[rank:rank + 1],
         "coalesced reduce_scatter_tensor")


def check_alltoall(rank, size):
    x = torch.arange(size * 2, dtype=torch.float32) + 100 * rank
    out = torch.zeros(size * 2)
    dist.all_to_all_single(out, x)
    want = torch.cat([torch.arange(2 * rank, 2 * rank + 2) + 100 * r for r in range(size)])
    same(out, want, "all_to_all_single")
    # rank r sends r+1+j rows to rank j
    in_splits = [rank + 1 + j for j in range(size)]
    out_splits = [r + 1 + rank for r in range(size)]
    x = torch.full((sum(in_splits), 2), float(rank))
    out = torch.zeros(sum(out_splits), 2)
    dist.all_to_all_single(out, x, out_splits, in_splits)
    same(out, torch.cat([torch.full((s, 2), float(r)) for r, s in enumerate(out_splits)]),
         "all_to_all_single with splits")
    outs = [torch.zeros(3, dtype=torch.int64) for _ in range(size)]
    dist.all_to_all(outs, [torch.full((3,), rank * 10 + j) for j in range(size)])
    for r in range(size):
        same(outs[r], torch.full((3,), r * 10 + rank), "all_to_all")


def check_rooted(rank, size):
    outs = [torch.zeros(3) for _ in range(size)] if rank == 1 else None
    dist.gather(value(rank, torch.float32, 3), outs, dst=1)
    if rank == 1:
        for r in range(size):
            same(outs[r], value(r, torch.float32, 3), "gather")
    out = torch.zeros(3)
    ins = [value(r, torch.float32, 3) * 7 for r in range(size)] if rank == 0 else None
    dist.scatter(out, ins, src=0)
    same(out, value(rank, torch.float32, 3) * 7, "scatter")
    dist.barrier()


def check_p2p(rank, size):
    peer = 1 - rank if size == 2 else (rank + 1) % size
    src = 1 - rank if size == 2 else (rank - 1) % size
    got = torch.zeros(5, dtype=torch.bfloat16)
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, value(rank, torch.bfloat16, 5), peer),
                                   dist.P2POp(dist.irecv, got, src)])
    for r in reqs:
        r.wait()
    same(got, value(src, torch.bfloat16, 5), "isend/irecv")
    if rank == 0:
        dist.send(torch.tensor([42.0, 43.0]), dst=size - 1, tag=3)
    elif rank == size - 1:
        t = torch.zeros(2)
        dist.recv(t, src=0, tag=3)
        same(t, torch.tensor([42.0, 43.0]), "send/recv")


def check_objects(rank, size):
    objs = [None] * size
    dist.all_gather_object(objs, {"rank": rank, "s": "x" * rank})
    assert objs == [{"rank": r, "s": "x" * r} for r in range(size)], objs
    lst = [("hello", rank)] if rank == 0 else [None]
    dist.broadcast_object_list(lst, src=0)
    assert lst == [("hello", 0)], lst


def ops(method="env"):
    rank, size = init(method)
    for check in (check_allreduce, check_blocking_entry, check_movement, check_reduce_scatter, check_alltoall,
                  check_rooted, check_p2p, check_objects):
        check(rank, size)
    dist.destroy_process_group()
    print("OPS OK rank %d of %d" % (rank, size), flush=True)


def launch(method="env"):
    rank, size = init(method)
    t = torch.ones(2) * (rank + 1)
    dist.all_reduce(t)
    same(t, torch.ones(2) * (size * (size + 1) // 2), "all_reduce")
    dist.destroy_process_group()
    print("LAUNCH OK rank %d of %d via %s" % (rank, size, method), flush=True)


def launch_mixed():
    if process_group_route():  # a group is one ProcessGroup for every device there
        try:
            init("env", backend="cpu:gloo,cuda:perseus")
        except ValueError as e:
            assert "mixes perseus with other backends" in str(e), e
            print("LAUNCH OK rank %s: cpu:gloo,cuda:perseus refused" % os.environ["RANK"],
                  flush=True)
            return
        raise AssertionError("a mixed backend string was accepted on the ProcessGroup route")
    rank, size = init("env", backend="cpu:gloo,cuda:perseus")
    dist.barrier()
    dist.destroy_process_group()
    print("LAUNCH OK rank %d of %d via cpu:gloo,cuda:perseus" % (rank, size), flush=True)


def groups(method="env"):
    rank, size = init(method)
    evens = dist.new_group([r for r in range(size) if r % 2 == 0])
    odd = dist.new_group([r for r in range(size) if r % 2 == 1])
    mine = evens if rank % 2 == 0 else odd
    t = torch.ones(1) * (rank + 1)
    dist.all_reduce(t, group=mine)
    members = [r for r in range(size) if r % 2 == rank % 2]
    same(t, torch.tensor([float(sum(r + 1 for r in members))]), "all_reduce on new_group")
    outs = [torch.zeros(1) for _ in members]
    dist.all_gather(outs, torch.ones(1) * rank, group=mine)
    same(torch.cat(outs), torch.tensor(members, dtype=torch.float32), "all_gather on new_group")
    t = torch.ones(1) * rank
    dist.broadcast(t, src=members[-1], group=mine)  # src is a global rank
    same(t, torch.tensor([float(members[-1])]), "broadcast on new_group")
    sub, _ = dist.new_subgroups(group_size=max(1, size // 2))
    t = torch.ones(1)
    dist.all_reduce(t, group=sub)
    same(t, torch.tensor([float(dist.get_world_size(sub))]), "all_reduce on new_subgroups")
    if not process_group_route():  # split_group needs a Backend (see _process_group.py)
        check_split_group(rank, size)
    dist.destroy_process_group()
    print("GROUPS OK rank %d of %d" % (rank, size), flush=True)


def check_split_group(rank, size):
    half = size // 2 or 1
    split = dist.split_group(split_ranks=[list(range(half)), list(range(half, size))])
    t = torch.ones(1) * (rank + 1)
    dist.all_reduce(t, group=split)
    mates = range(half) if rank < half else range(half, size)
    same(t, torch.tensor([float(sum(r + 1 for r in mates))]), "all_reduce on split_group")
    dist.barrier(group=split)
    objs = [None] * dist.get_world_size(split)
    dist.all_gather_object(objs, rank, group=split)
    assert objs == list(mates), objs


def mesh(method="env"):
    from torch.distributed.device_mesh import init_device_mesh
    rank, size = init(method)
    m = init_device_mesh("cpu", (2, size // 2), mesh_dim_names=("replicate", "shard"))
    for dim in ("replicate", "shard"):
        g = m.get_group(dim)
        ranks = dist.get_process_group_ranks(g)
        t = torch.ones(1) * (rank + 1)
        dist.all_reduce(t, group=g)
        same(t, torch.tensor([float(sum(r + 1 for r in ranks))]), "mesh dim %s" % dim)
    m1 = init_device_mesh("cpu", (size,))
    t = torch.ones(1)
    dist.all_reduce(t, group=m1.get_group())
    same(t, torch.tensor([float(size)]), "1-D mesh")
    dist.destroy_process_group()
    print("MESH OK rank %d of %d" % (rank, size), flush=True)


def consumers(method="env"):
    """DDP, FSDP2 and the object collectives, briefly (the consumer tests go further)."""
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel as DDP
    rank, size = init(method)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    ddp = DDP(model)
    x = torch.randn(4, 8) + rank
    ddp(x).sum().backward()
    g = model[0].weight.grad.clone()
    dist.all_reduce(g, op=R.MAX)
    same(g, model[0].weight.grad, "DDP gradients equal on every rank")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    for layer in net:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(net)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for _ in range(2):
        net(torch.randn(4, 8) + rank).sum().backward()
        opt.step()
        opt.zero_grad()
    full = net[0].weight.full_tensor()
    ref = full.clone()
    dist.broadcast(ref, src=0)
    same(full, ref, "FSDP2 parameters equal on every rank")
    dist.destroy_process_group()
    print("CONSUMERS OK rank %d of %d" % (rank, size), flush=True)


def cuda(method="env"):
    """CUDA tensors (world size 1 on the device check): the ops, and Work.wait() ordering the
    caller's current stream after the collective without blocking the host."""
    rank, size = init(method)
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        t = value(rank, dtype).to(dev)
        dist.all_reduce(t)
        same(t.cpu(), value(0, torch.float64) * size, "CUDA all_reduce %s" % dtype)
    out = torch.zeros(4 * size, device=dev)
    dist.all_gather_into_tensor(out, value(rank, torch.float32).to(dev))
    same(out.cpu(), torch.cat([value(r, torch.float32) for r in range(size)]), "CUDA allgather")
    out = torch.zeros(2, device=dev)
    dist.reduce_scatter_tensor(out, value(rank, torch.float32, 2 * size).to(dev))
    same(out.cpu(), (value(0, torch.float32, 2 * size) * size)[2 * rank:2 * rank + 2],
         "CUDA reduce_scatter_tensor")
    t = value(rank, torch.float32).to(dev)
    dist.broadcast(t, src=0)
    same(t.cpu(), value(0, torch.float32), "CUDA broadcast")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        big = torch.ones(1 << 24, device=dev)
        torch.cuda._sleep(200_000_000)  # keeps the stream busy: the collective waits for it
        work = dist.all_reduce(big, async_op=True)
        start = time.perf_counter()
        work.wait()
        waited = time.perf_counter() - start
        total = big.sum()
    side.synchronize()
    assert total.item() == (1 << 24) * size, total.item()
    assert waited < 0.05, "Work.wait() blocked the host for %.3f s" % waited
    with torch.cuda.stream(side):  # a blocking call orders the stream, not the host, too
        big = torch.ones(1 << 24, device=dev)
        torch.cuda._sleep(200_000_000)
        start = time.perf_counter()
        dist.all_reduce(big)
        waited = time.perf_counter() - start
        total = big.sum()
    side.synchronize()
    assert total.item() == (1 << 24) * size, total.item()
    assert waited < 0.05, "dist.all_reduce blocked the host for %.3f s" % waited
    fut = dist.all_reduce(torch.ones(3, device=dev), async_op=True).get_future()
    same(fut.then(lambda f: f.value()[0] + 1).wait().cpu(), torch.ones(3) * size + 1,
         "CUDA future .then()")
    # Like NCCL's, the future completes once the collective is on its stream, not when the GPU
    # has run it: DDP's reducer waits for it at the end of backward and must not drain the GPU.
    with torch.cuda.stream(side):
        torch.cuda._sleep(400_000_000)
        fut = dist.all_reduce(torch.ones(3, device=dev), async_op=True).get_future()
        start = time.perf_counter()
        fut.wait()
        waited = time.perf_counter() - start
        busy = not side.query()
        result = fut.value()[0].sum()
    side.synchronize()
    assert result.item() == 3 * size, result.item()
    assert busy and waited < 0.05, (
        "the CUDA future waited %.3f s for the GPU (stream still busy after: %s)" % (waited, busy))
    dist.destroy_process_group()
    print("CUDA OK rank %d of %d" % (rank, size), flush=True)


def cuda_ddp(method="env"):
    """DDP on CUDA (the device check's world size 1): forward, backward and an optimizer step,
    plain and with the fp16 comm hook; the gradients equal the unwrapped model's, averaged."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP
    rank, size = init(method)
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    for hook in (None, default_hooks.fp16_compress_hook):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                    torch.nn.Linear(64, 4)).to(dev)
        ref = [p.detach().clone() for p in model.parameters()]
        ddp = DDP(model, device_ids=[0])
        if hook is not None:
            ddp.register_comm_hook(None, hook)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        x = torch.randn(8, 32, device=dev)  # the same batch on every rank
        ddp(x).sum().backward()
        local = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                    torch.nn.Linear(64, 4)).to(dev)
        with torch.no_grad():
            for p, r in zip(local.parameters(), ref):
                p.copy_(r)
        local(x).sum().backward()
        tol = 1e-2 if hook is not None else 1e-5
        for p, q in zip(model.parameters(), local.parameters()):
            assert torch.allclose(p.grad, q.grad, rtol=tol, atol=tol), (hook, p.grad, q.grad)
        opt.step()
        torch.cuda.synchronize()
    dist.destroy_process_group()
    print("CUDA DDP OK rank %d of %d" % (rank, size), flush=True)


def process_group_groups():
    """Not a check: the perseus groups of the checks after it are ProcessGroup subclasses, the
    route of torches that cannot build a Python Backend, so that a torch that can tests it."""
    prefer_process_group()


def death(method="env"):
    rank, size = init(method, timeout_s=20)
    t = torch.ones(1)
    dist.all_reduce(t)
    if rank == size - 1:
        os._exit(3)
    start = time.monotonic()
    try:
        for _ in range(1000):
            dist.all_reduce(t)
            time.sleep(0.01)
    except dist.DistBackendError as e:
        print("DEATH ERROR after %.1f s: %s" % (time.monotonic() - start, e), flush=True)
        os._exit(0)
    raise AssertionError("no error after a rank died")


def shrink_excluded(method="env"):
    """Rank 1 stays alive but takes no part: the others shrink the default group without it,
    rank 2 becoming rank 1. A subgroup cannot shrink (Note [Shrinking] in _shrink.py)."""
    rank, size = init(method, timeout_s=20)
    _shrink_without_rank_1(rank, size, torch.device("cpu"))


def shrink_excluded_cuda():
    """shrink_excluded on CUDA tensors, one GPU per rank, the group bound to it (torch gives
    a shrunk group a backend for its bound device)."""
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", os.environ["RANK"])))
    torch.cuda.set_device(dev)
    dist.init_process_group("perseus", timeout=datetime.timedelta(seconds=20), device_id=dev)
    _shrink_without_rank_1(dist.get_rank(), dist.get_world_size(), dev)


def _shrink_without_rank_1(rank, size, dev):
    survivors = [r for r in range(size) if r != 1]
    sub = dist.new_group(survivors)
    if rank == 1:
        time.sleep(3)  # alive past the others' shrink; its group is no longer used
        os._exit(0)
    try:
        dist.shrink_group([1 - dist.get_group_rank(sub, rank)], group=sub)
        raise AssertionError("a subgroup shrank")
    except dist.DistBackendError as e:
        assert "subgroup" in str(e), e
    start = time.monotonic()
    dist.shrink_group([1])
    assert (dist.get_rank(), dist.get_world_size()) == (survivors.index(rank), size - 1)
    t = torch.tensor([float(rank + 1)], device=dev)
    dist.all_reduce(t)
    same(t.cpu(), torch.tensor([float(sum(r + 1 for r in survivors))]), "all_reduce after shrink")
    print("SHRINK OK on %s after %.1f s" % (dev.type, time.monotonic() - start), flush=True)
    dist.destroy_process_group()


def gather_sizes(method="env"):
    """all_gather_into_tensor where rank 1 gives a longer input than rank 0 (each with an output
    of the group size times its own input): both get an error naming the op, none waits."""
    rank, size = init(method, timeout_s=20)
    n = 4 + rank
    try:
        dist.all_gather_into_tensor(torch.zeros(size * n), torch.ones(n))
    except dist.DistBackendError as e:
        print("GATHER SIZES ERROR: %s" % e, flush=True)
        t = torch.ones(1)
        dist.all_reduce(t)  # the job goes on
        assert t.item() == size, t
        dist.destroy_process_group()
        return
    raise AssertionError("no error for inputs of different sizes")


def mismatch(method="env"):
    rank, size = init(method, timeout_s=5)
    start = time.monotonic()
    try:
        if rank == 0:
            dist.all_reduce(torch.ones(3))
        else:
            dist.broadcast(torch.ones(2), src=1)
    except dist.DistBackendError as e:
        print("MISMATCH ERROR after %.1f s: %s" % (time.monotonic() - start, e), flush=True)
        os._exit(0)
    raise AssertionError("no error for a collective that never matches")


if __name__ == "__main__":
    for step in sys.argv[1:]:
        name, _, method = step.partition("@")
        globals()[name](*([method] if method else []))
