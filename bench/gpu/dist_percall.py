"""Per-call cost of torch.distributed's all_reduce on a 4-byte CUDA tensor at world size 1:
a no-op Python backend (the floor of any backend written in Python: torch's dispatch, the
options, a completed Work), backend perseus and torch's own NCCL backend, in one process.

    python bench/gpu/dist_percall.py [--calls 2000] [--rounds 7]
    python bench/gpu/dist_percall.py --cpu    # rehearsal: CPU tensors, gloo for nccl

Each sample issues --calls all_reduce calls back to back and synchronizes the device once, so
it measures what a training loop pays per call; the backends alternate over --rounds. Prints
`RESULT dist_percall backend=... us_per_call=...` (median round, with the fastest) per backend
and the perseus and nccl figures over the floor."""
import datetime
import os
import socket
import statistics
import time

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import Backend, ProcessGroup, Work

import perseus.torch  # noqa: F401  (registers "perseus")
from perseus.torch.distributed import process_group_route

from common import device_for, parse, sync


class _DoneWork(Work):
    def wait(self, timeout=None):
        return True


class _Noop:
    """Returns a completed Work without communicating: the floor of a Python backend."""

    def getBackendName(self):
        return "noop"

    def allreduce(self, tensors, opts):
        return _DoneWork()


class NoopBackend(_Noop, Backend):
    pass


class NoopProcessGroup(_Noop, ProcessGroup):
    """The floor where perseus groups are ProcessGroups (Note [ProcessGroup route])."""


def _noop(store, rank, size, timeout):
    return (NoopProcessGroup if process_group_route() else NoopBackend)(rank, size)


def per_call_us(group, tensor, calls):
    for _ in range(100):
        dist.all_reduce(tensor, group=group)
    sync(tensor.device)
    start = time.perf_counter()
    for _ in range(calls):
        dist.all_reduce(tensor, group=group)
    sync(tensor.device)
    return (time.perf_counter() - start) / calls * 1e6


def main():
    args = parse(__doc__.splitlines()[0], lambda p: (
        p.add_argument("--calls", type=int, default=2000),
        p.add_argument("--rounds", type=int, default=7)))
    device = device_for(args)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.Backend.register_backend("noop", _noop, devices=["cpu", "cuda"])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    dist.init_process_group("perseus", init_method="tcp://127.0.0.1:%d" % port, rank=0,
                            world_size=1, timeout=datetime.timedelta(seconds=120))
    torch_backend = "gloo" if args.cpu else "nccl"
    groups = {"noop": dist.new_group([0], backend="noop"), "perseus": dist.group.WORLD,
              torch_backend: dist.new_group([0], backend=torch_backend)}
    tensor = torch.ones(1, device=device)
    times = {name: [] for name in groups}
    for _ in range(args.rounds):
        for name, group in groups.items():
            times[name].append(per_call_us(group, tensor, args.calls))
    floor = statistics.median(times["noop"])
    route = "ProcessGroup" if process_group_route() else "Backend"
    for name, ts in times.items():
        median = statistics.median(ts)
        print("RESULT dist_percall backend=%s route=%s device=%s us_per_call=%.2f fastest=%.2f "
              "over_floor=%.2f" % (name, route, device.type, median, min(ts), median - floor),
              flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
