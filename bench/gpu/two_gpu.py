"""Step (e): 2 ranks, one GPU each, NCCL path (started by perseusrun -np 2).

  --check: allreduce/allgather/broadcast/alltoall/reducescatter on float32, float16, bfloat16
           and int32 (small integers: exact in every dtype), plus allreduce on a registered
           process set; any mismatch exits 3 naming the op and dtype.
  --bench: allreduce/allgather/reducescatter bus bandwidth of Perseus and of torch.distributed
           NCCL (same process, same buffers) at 1 MiB .. 1 GiB, and 4-byte allreduce latency.
  --split: the phases of one 4-byte hvd.allreduce_ on the GPU (as b_w1_split, at 2 ranks),
           with the engine's own stamps (Handle.times()): submit, the engine's span from
           submission to completion, the waiter's wake-up after it, the stream hand-off and
           the device sync; tagged with --tag (the environment it ran under).
Bus bandwidth follows nccl-tests: allreduce 2(n-1)/n * S / t, allgather and reducescatter
(n-1)/n * S / t, S the full buffer (allgather output, reducescatter input)."""

import statistics

import torch

import common
import perseus.torch as hvd

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int32]


def expect_equal(got, want, what):
    if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got.cpu(),
                                                                             want.cpu()):
        common.fail("%s: got %s%s, want %s%s" % (what, got.dtype, tuple(got.shape), want.dtype,
                                                 tuple(want.shape)))


def check(dev, rank, size, ps):
    n = 1027  # odd: exercises the kernels' tails
    base = torch.arange(n) % 7
    for dt in DTYPES:
        tag = str(dt).split(".")[-1]
        x = (base + rank + 1).to(dt).to(dev)
        want = (base * size + size * (size + 1) // 2).to(dt)
        expect_equal(hvd.allreduce(x, op=hvd.Sum, name="chk.ar." + tag), want, "allreduce " + tag)
        expect_equal(hvd.allreduce(x, op=hvd.Sum, name="chk.ps." + tag, process_set=ps), want,
                     "allreduce on a process set " + tag)
        rows = torch.full((rank + 2, 4), rank + 1).to(dt).to(dev)
        want = torch.cat([torch.full((r + 2, 4), r + 1) for r in range(size)]).to(dt)
        expect_equal(hvd.allgather(rows, name="chk.ag." + tag), want, "allgather " + tag)
        want = (base + 1 + 1).to(dt) if size > 1 else (base + 1).to(dt)
        expect_equal(hvd.broadcast(x, root_rank=min(1, size - 1), name="chk.bc." + tag), want,
                     "broadcast " + tag)
        # rank j sends d+1 rows valued 10j+d to rank d.
        send = torch.cat([torch.full((d + 1, 3), 10 * rank + d) for d in range(size)]).to(dt)
        splits = torch.tensor([d + 1 for d in range(size)], dtype=torch.int32)
        want = torch.cat([torch.full((rank + 1, 3), 10 * j + rank) for j in range(size)]).to(dt)
        got = hvd.alltoall(send.to(dev), splits=splits, name="chk.a2a." + tag)
        expect_equal(got[0] if isinstance(got, tuple) else got, want, "alltoall " + tag)
        rs_in = (torch.arange(size * 3 * 4).reshape(size * 3, 4) % 5 + rank).to(dt).to(dev)
        total = sum((torch.arange(size * 3 * 4).reshape(size * 3, 4) % 5 + r) for r in range(size))
        want = total[rank * 3:(rank + 1) * 3].to(dt)
        expect_equal(hvd.reducescatter(rs_in, op=hvd.Sum, name="chk.rs." + tag), want,
                     "reducescatter " + tag)
    if rank == 0:
        common.result("e_check", ops="allreduce,allgather,broadcast,alltoall,reducescatter,pset",
                      dtypes="f32,f16,bf16,i32", ok=1)


def bench(args, dev, rank, size):
    dist = common.torch_dist_init(args, rank, size, 29534)
    sizes = [4 << 10, 1 << 20] if args.cpu else [1 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30]
    f = (size - 1) / size
    for nbytes in sizes:
        reps = 5 if args.cpu else common.reps_for(nbytes)
        n = nbytes // 4
        x = torch.randn(n, device=dev)
        part = torch.randn(n // size, device=dev)
        gathered = torch.empty(n, device=dev)
        scattered = torch.empty(n // size, device=dev)
        rows = {}
        rows["allreduce"] = (
            common.median_us(lambda: hvd.allreduce_(x, op=hvd.Sum, name="bw.ar"), dev, reps),
            common.median_us(lambda: dist.all_reduce(x), dev, reps), 2 * f)
        rows["allgather"] = (
            common.median_us(lambda: hvd.allgather(part, name="bw.ag"), dev, reps),
            common.median_us(lambda: dist.all_gather_into_tensor(gathered, part), dev, reps), f)
        rows["reducescatter"] = (
            common.median_us(lambda: hvd.reducescatter(x, op=hvd.Sum, name="bw.rs"), dev, reps),
            common.median_us(lambda: dist.reduce_scatter_tensor(scattered, x), dev, reps), f)
        for op, (p_us, t_us, factor) in rows.items():
            if rank == 0:
                common.result("e_busbw", op=op, bytes=nbytes,
                              perseus_GBps=factor * nbytes / p_us / 1e3,
                              nccl_GBps=factor * nbytes / t_us / 1e3, bw_ratio=t_us / p_us)
        del x, part, gathered, scattered
    y = torch.ones(1, device=dev)
    reps = 20 if args.cpu else 300
    p_us = common.median_us(lambda: hvd.allreduce_(y, op=hvd.Sum, name="lat.ar"), dev, reps)
    t_us = common.median_us(lambda: dist.all_reduce(y), dev, reps)
    if rank == 0:
        common.result("e_latency_4B", perseus_us=p_us, nccl_us=t_us, time_ratio=p_us / t_us)
    dist.destroy_process_group()


def split(args, dev, rank, size):
    x = torch.ones(1, device=dev)
    reps = 20 if args.cpu else 300
    cols = {k: [] for k in ("submit", "engine", "wake", "stream", "sync", "total", "skew")}
    for i in range(reps + 10):
        common.sync(dev)
        hvd.barrier()
        (t0, t1, t2, t3, _, t5), core = common.allreduce_phases(hvd, x, "lat.split", dev)
        submitted, completed = core.times()
        if i >= 10:
            for k, v in (("submit", t1 - t0), ("engine", completed - submitted),
                         ("wake", t2 - completed), ("stream", t3 - t2), ("sync", t5 - t3),
                         ("total", t5 - t0), ("skew", submitted)):
                cols[k].append(v)
    # skew: how much later the last rank submitted than this one (same host, one clock).
    mine = torch.tensor(cols["skew"], dtype=torch.float64)
    others = hvd.allgather(mine.unsqueeze(0), name="split.skew")
    cols["skew"] = (others.max(0).values - mine).tolist()
    med = {k + "_us": statistics.median(v) * 1e6 for k, v in cols.items()}
    if rank == 0:
        common.result("e_split", tag=args.tag, **med)


def main():
    def options(p):
        p.add_argument("mode", choices=["check", "bench", "split"])
        p.add_argument("--tag", default="default")
    args = common.parse(__doc__, options)
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    dev = common.device_for(args, hvd.local_rank())
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    if args.mode == "check":
        ps = hvd.add_process_set(list(range(size)))
        check(dev, rank, size, ps)
    elif args.mode == "split":
        split(args, dev, rank, size)
    else:
        bench(args, dev, rank, size)
    hvd.shutdown()


if __name__ == "__main__":
    main()
