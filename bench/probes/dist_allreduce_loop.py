"""dist.all_reduce of a 4-byte tensor on backend perseus at world size 1, back to back, for a
sampling profiler (bench/probes/sampler.c): nothing else runs once the loop starts.

    LD_PRELOAD=sampler.so SAMPLER_OUT=prof python3 bench/probes/dist_allreduce_loop.py \
        [--device cuda] [--calls 200000]"""
import argparse
import datetime
import os
import socket
import time

import torch
import torch.distributed as dist

import perseus.torch  # noqa: F401  (registers "perseus")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--calls", type=int, default=200000)
    args = p.parse_args()
    os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        os.environ["MASTER_PORT"] = str(s.getsockname()[1])
    dist.init_process_group("perseus", timeout=datetime.timedelta(seconds=120))
    t = torch.ones(1, device=args.device)
    for _ in range(1000):
        dist.all_reduce(t)
    start = time.perf_counter()
    for _ in range(args.calls):
        dist.all_reduce(t)
    if args.device == "cuda":
        torch.cuda.synchronize()
    print("%.2f us per call over %d calls" % ((time.perf_counter() - start) / args.calls * 1e6,
                                              args.calls))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
