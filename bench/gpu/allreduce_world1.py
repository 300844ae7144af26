"""Step (b): perseus.torch allreduce at world size 1 (NCCL path) vs torch.distributed NCCL at
world size 1, same process, same tensors, same timing rule (common.median_us)."""

import torch

import common
import perseus.torch as hvd


def main():
    args = common.parse(__doc__)
    dev = common.device_for(args)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    hvd.init()
    dist = common.torch_dist_init(args, 0, 1, 29533)
    sizes = [4, 1 << 20, 4 << 20] if args.cpu else [4, 1 << 20, 256 << 20]
    for nbytes in sizes:
        x = torch.randn(nbytes // 4, device=dev)
        ref = x.clone()
        reps = 10 if args.cpu else common.reps_for(nbytes)
        # Sum at world size 1 leaves the values as they are: checked after the timed loop.
        name = "ar.w1.%d" % nbytes
        p_us = common.median_us(lambda: hvd.allreduce_(x, op=hvd.Sum, name=name), dev, reps)
        if not torch.equal(x, ref):
            common.fail("perseus allreduce world 1 changed the tensor (%d bytes)" % nbytes)
        t_us = common.median_us(lambda: dist.all_reduce(x), dev, reps)
        common.result("b_allreduce_w1", bytes=nbytes, perseus_us=p_us, torch_us=t_us,
                      time_ratio=p_us / t_us)
    dist.destroy_process_group()
    hvd.shutdown()


if __name__ == "__main__":
    main()
