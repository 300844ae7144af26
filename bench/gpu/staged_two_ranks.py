"""Step (c): 2 ranks on ONE GPU through perseusrun: the GPU backend sees two members on the
same device (NCCL refuses that) and takes the host-staged path. Results are checked against
the sum each rank can recompute from both ranks' seeds.

Then the split of the staged allreduce at each size (`c_staged_split`), each part timed
alone with both ranks doing it at the same time: the device-to-host copy into pinned memory,
the CPU allreduce of the same bytes through perseus (the shared-memory collective the staged
path rides on), the host-to-device copy, and the staged allreduce itself. The pipeline
overlaps the copies with the reduction, so total < d2h + cpu + h2d when it works
(`overlap` = (d2h + cpu + h2d) / total). scripts/device_check.sh runs this with
PERSEUS_REDUCE_THREADS=1 and =0 (auto), printed as `reduce_threads`."""

import os
import statistics
import time

import torch

import common
import perseus.torch as hvd


def both_ranks_us(fn, dev, reps):
    """Median microseconds of fn() + device sync, both ranks starting together (a barrier
    before each timed call, outside the timing)."""
    ts = []
    for i in range(reps + 2):
        hvd.barrier()
        t0 = time.perf_counter()
        fn()
        common.sync(dev)
        if i >= 2:
            ts.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(ts)


def split(x, dev, nbytes, reps):
    pin = dev.type == "cuda"
    host = torch.empty(x.numel(), dtype=x.dtype, pin_memory=pin)
    host.copy_(x)
    cpu_t = host.clone()
    d2h = both_ranks_us(lambda: host.copy_(x, non_blocking=True), dev, reps)
    h2d = both_ranks_us(lambda: x.copy_(host, non_blocking=True), dev, reps)
    cpu = both_ranks_us(lambda: hvd.allreduce_(cpu_t, op=hvd.Sum, name="staged.cpu"), dev, reps)
    total = both_ranks_us(lambda: hvd.allreduce_(x, op=hvd.Sum, name="staged.split"), dev, reps)
    gb = lambda us: nbytes / us / 1e3  # noqa: E731
    return dict(bytes=nbytes, reduce_threads=os.environ.get("PERSEUS_REDUCE_THREADS", "unset"),
                d2h_us=d2h, cpu_allreduce_us=cpu, h2d_us=h2d, total_us=total,
                d2h_GBps=gb(d2h), cpu_GBps=gb(cpu), h2d_GBps=gb(h2d), total_GBps=gb(total),
                overlap=(d2h + cpu + h2d) / total)


def main():
    args = common.parse(__doc__)
    hvd.init()
    dev = common.device_for(args, 0)  # every rank on device 0, on purpose
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    rank, size = hvd.rank(), hvd.size()
    sizes = [4, 1 << 20] if args.cpu else [4, 64 << 20]
    threads = os.environ.get("PERSEUS_REDUCE_THREADS", "unset")
    chunk = os.environ.get("PERSEUS_STAGED_CHUNK_BYTES", "default")
    for nbytes in sizes:
        n = nbytes // 4
        gens = [torch.Generator().manual_seed(1000 * r + nbytes % 997) for r in range(size)]
        parts = [torch.randn(n, generator=g) for g in gens]
        expect = torch.stack(parts).sum(0)
        x = parts[rank].to(dev)
        out = hvd.allreduce(x, op=hvd.Sum, name="staged.check.%d" % nbytes)
        common.sync(dev)
        err = (out.cpu() - expect).abs().max().item()
        if err > 1e-4 * max(1.0, expect.abs().max().item()):
            common.fail("rank %d: staged allreduce of %d bytes is off by %g" % (rank, nbytes, err))
        reps = 10 if args.cpu else (100 if nbytes <= 1 << 20 else 10)
        us = common.median_us(lambda: hvd.allreduce(x, op=hvd.Sum, name="staged.t.%d" % nbytes),
                              dev, reps)
        busbw = 2.0 * (size - 1) / size * nbytes / (us * 1e-6) / 1e9
        if rank == 0:
            common.result("c_staged_2ranks_1gpu", bytes=nbytes, reduce_threads=threads,
                          chunk=chunk, median_us=us, busbw_GBps=busbw, ok=1)
        # Both sizes: at 4 B the parts show what one GPU command costs with two processes
        # (two CUDA contexts) on the device.
        kv = split(x, dev, nbytes, 5 if args.cpu else (50 if nbytes <= 1 << 20 else 10))
        if rank == 0:
            common.result("c_staged_split", chunk=chunk, **kv)
    hvd.shutdown()


if __name__ == "__main__":
    main()
