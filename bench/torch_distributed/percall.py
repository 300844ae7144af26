"""Per-call cost of dist.all_reduce on a 4-byte tensor: a no-op Python backend (the floor of any
backend written in Python: torch's dispatch, the options, a completed Work), perseus and gloo;
and, for the engine's own share, the Horovod API's blocking allreduce_ of the same tensor
(row "hvd", no torch.distributed in the way).

    python bench/torch_distributed/percall.py                     # world size 1, all three
    perseusrun -np 2 python bench/torch_distributed/percall.py    # 2 ranks, all three
    python bench/torch_distributed/percall.py --device cuda       # 1 GPU: nccl for gloo

Where perseus groups are c10d Backends, rows "noop-pg" and "perseus-pg" measure the
ProcessGroup route too (perseus.torch.distributed.prefer_process_group), each against the floor
of its own route.

Row "noop-c++" is the floor of a compiled backend: torch's own FakeProcessGroup, a C++ c10d
backend that communicates nothing (torch.testing._internal.distributed.fake_pg registers it as
"fake"). `noop - noop-c++` is what writing perseus's backend in C++ against the user's torch
could save per call at most; docs/torch-distributed.md weighs it against that coupling.

Each backend runs in its own process group on the same ranks, interleaved over --rounds; the
fastest and the median round are printed per backend (microseconds per call). On a busy machine
the fastest round is the one least disturbed by other processes. On CUDA each timed loop ends
with torch.cuda.synchronize(), so the GPU work the calls queued counts too.
bench/torch_distributed/percall_split.py splits the perseus call into its stages."""
import argparse
import datetime
import os
import statistics
import time

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import Backend, ProcessGroup, Work

import perseus.torch  # noqa: F401  (registers "perseus")
from perseus.torch.distributed import prefer_process_group, process_group_route


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
    """The floor of the ProcessGroup route (Note [ProcessGroup route])."""


def _noop(store, rank, size, timeout):
    return (NoopProcessGroup if process_group_route() else NoopBackend)(rank, size)


def _noop_pg(store, rank, size, timeout):
    return NoopProcessGroup(rank, size)


def _timed(call, calls, device):
    for _ in range(200):
        call()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(calls):
        call()
    if device == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def per_call_us(group, calls, device="cpu"):
    t = torch.ones(1, device=device)
    return _timed(lambda: dist.all_reduce(t, group=group), calls, device)


def _compiled_noop(ranks):
    try:
        import torch.testing._internal.distributed.fake_pg  # noqa: F401  (registers "fake")
    except ImportError:  # a torch without its testing package: the row is left out
        return None
    return dist.new_group(ranks, backend="fake")


def hvd_per_call_us(calls, device="cpu"):
    import perseus.torch as hvd
    t = torch.ones(1, device=device)
    return _timed(lambda: hvd.allreduce_(t, name="percall", op=hvd.Sum), calls, device)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                   help="where the tensor lives; cuda compares with nccl instead of gloo")
    args = p.parse_args()
    dist.Backend.register_backend("noop", _noop, devices=["cpu", "cuda"])
    dist.Backend.register_backend("noop_pg", _noop_pg, devices=["cpu", "cuda"])
    if args.device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    if "RANK" not in os.environ:
        os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1")
        with __import__("socket").socket() as s:
            s.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(s.getsockname()[1])
    dist.init_process_group("perseus", timeout=datetime.timedelta(seconds=120))
    ranks = list(range(dist.get_world_size()))
    groups = {"noop": dist.new_group(ranks, backend="noop"),
              "noop-c++": _compiled_noop(ranks),
              "perseus": dist.group.WORLD,
              "gloo" if args.device == "cpu" else "nccl": dist.new_group(
                  ranks, backend="gloo" if args.device == "cpu" else "nccl")}
    if not process_group_route():  # the ProcessGroup route too, with its own floor
        prefer_process_group()
        groups["noop-pg"] = dist.new_group(ranks, backend="noop_pg")
        groups["perseus-pg"] = dist.new_group(ranks, backend="perseus")
        prefer_process_group(False)
    groups = {name: g for name, g in groups.items() if g is not None}
    times = {name: [] for name in list(groups) + ["hvd"]}
    for _ in range(args.rounds):
        for name, group in groups.items():
            times[name].append(per_call_us(group, args.calls, args.device))
        times["hvd"].append(hvd_per_call_us(args.calls, args.device))
    if dist.get_rank() == 0:
        floors = {"": (min(times["noop"]), statistics.median(times["noop"]))}
        if "noop-pg" in times:
            floors["-pg"] = (min(times["noop-pg"]), statistics.median(times["noop-pg"]))
        print("world size %d, %s, torch %s, %d calls x %d rounds: us per call, fastest round "
              "(median round)" % (len(ranks), args.device, torch.__version__, args.calls,
                                  args.rounds))
        for name, ts in times.items():
            best, median = min(ts), statistics.median(ts)
            floor, floor_median = floors["-pg" if name.endswith("-pg") else ""]
            print("  %-10s %7.1f (%7.1f)   +%.1f (+%.1f) over the floor"
                  % (name, best, median, best - floor, median - floor_median))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
