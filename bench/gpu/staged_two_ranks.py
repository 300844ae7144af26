"""Step (c): 2 ranks on ONE GPU through perseusrun: the GPU backend sees two members on the
same device (NCCL refuses that) and takes the host-staged path. Results are checked against
the sum each rank can recompute from both ranks' seeds."""

import torch

import common
import perseus.torch as hvd


def main():
    args = common.parse(__doc__)
    hvd.init()
    dev = common.device_for(args, 0)  # every rank on device 0, on purpose
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    rank, size = hvd.rank(), hvd.size()
    sizes = [4, 1 << 20] if args.cpu else [4, 64 << 20]
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
            common.result("c_staged_2ranks_1gpu", bytes=nbytes, median_us=us, busbw_GBps=busbw,
                          ok=1)
    hvd.shutdown()


if __name__ == "__main__":
    main()
