"""Where the per-call cost of dist.all_reduce (4 B) on backend "perseus" goes: the no-op floor,
the whole call, the backend's own allreduce called directly, and each stage of it, timed in one
process and interleaved round by round.

    python bench/torch_distributed/percall_split.py                    # CPU, world size 1
    perseusrun -np 2 python bench/torch_distributed/percall_split.py   # CPU, 2 ranks
    python bench/torch_distributed/percall_split.py --device cuda      # 1 GPU, world size 1
    ... --route pg   # perseus and the floor as ProcessGroup subclasses (torch 2.11's route)

Rows (microseconds per call; fastest round, then the median round):
  floor      dist.all_reduce on a no-op Python backend (returns a completed Work)
  whole      dist.all_reduce on perseus; `whole - floor` is what the backend adds
  whole-py   the same with the blocking call's C entry switched off: the Python path
  direct     the backend's allreduce([t], opts) and the Work's wait(), called from Python;
             `floor-direct` is the same for the no-op backend, so that `direct - floor-direct`
             is the backend's own share and `whole - floor` less that share is what torch's
             side costs more for perseus than for the no-op backend
  async      the same with async_op=True (the path of DDP's hooks and of every CUDA call)
  s:...      the stages of those paths, each alone (their sum exceeds `direct` by the Python
             calls that join them); `s:loop` is the timing loop's own cost per call, and
             `s:entry` the blocking call's C entry (dist_allreduce), all `direct` makes on the
             blocking path besides the Python method around it.
On CUDA every timed loop ends with torch.cuda.synchronize(), so GPU work queued by the calls
counts too."""
import argparse
import contextlib
import datetime
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import AllreduceOptions

import perseus.torch  # noqa: F401  (registers "perseus")
from perseus.torch import _tensors as _t
from perseus.torch.distributed import prefer_process_group, process_group_route
from perseus.torch.distributed._backend import _current_stream
from perseus.torch.distributed._reduce import plain_op
from perseus.torch.distributed._work import PerseusWork

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from percall import NoopBackend, NoopProcessGroup  # noqa: E402


def _options(async_op):
    opts = AllreduceOptions()
    opts.reduceOp = dist.ReduceOp.SUM
    opts.asyncOp = async_op
    return opts


def stages(b, t):
    """name -> a function of no arguments running that stage once (see the docstring)."""
    sync, asyn = _options(False), _options(True)
    core, ps = b._core, b._ps
    cuda = t.is_cuda
    code = _t.CORE_DTYPE[t.dtype]
    h = core.allreduce("split.h", _t.capsule(t), None, 0, 1.0, 1.0, ps, _t.stream_of(t))
    h.wait(60)
    dev = t.device if cuda else None
    done = PerseusWork(b, "allreduce", None, [t])
    rows = {
        "s:loop": lambda: None,
        "s:asyncOp": lambda: sync.asyncOp,
        "s:op": lambda: plain_op(sync.reduceOp),
        "s:tensor": lambda: (t.is_cpu, t.layout, t.is_contiguous(), t.dtype),
        "s:data_ptr+shape": lambda: (t.data_ptr(), t.shape),
        "s:name": lambda: next(b._allreduce_names[t.numel() * 16 + code]),
        "s:capsule": lambda: _t.capsule(t),
        "s:work": lambda: PerseusWork(b, "allreduce", h, [t], None, dev),
        "s:wait-done": done.wait,
        "s:wait-handle": PerseusWork(b, "allreduce", h, [t], None, dev).wait,
        "direct": lambda: b.allreduce([t], sync).wait(),
        "async": lambda: b.allreduce([t], asyn).wait(),
    }
    if not cuda:  # the engine's blocking calls (CPU)
        rows["s:core-capsule"] = lambda: core.allreduce("split.c", _t.capsule(t), None, 0, 1.0,
                                                        1.0, ps, 0, True)
        rows["s:core-inplace"] = lambda: core.allreduce_inplace(
            "split.i", t.data_ptr(), code, t.shape, 0, 1.0, 1.0, ps)
    else:  # the current stream's pointer, and making it wait on a completed collective
        rows["s:stream"] = lambda: _current_stream(t)
        rows["s:stream-wait"] = lambda: h.cuda_stream_wait(_current_stream(t))
    if getattr(b, "_dist_allreduce", None) is not None:  # the blocking call's one C entry
        rows["s:entry"] = lambda: b._dist_allreduce([t], sync, b._fast)
    rows["s:core-submit"] = lambda: core.allreduce("split.s", _t.capsule(t), None, 0, 1.0, 1.0,
                                                   ps, _t.stream_of(t)).wait(60)
    return rows


@contextlib.contextmanager
def entry_off(b, off):
    """With off: the backend's blocking allreduce without its C entry, the Python path it
    leaves calls to (row `whole-py`, beside `whole` in the same run)."""
    saved = b._dist_allreduce if off else None
    if off:
        b._dist_allreduce = None
    try:
        yield
    finally:
        if off:
            b._dist_allreduce = saved


def timed(fn, calls, cuda, clock):
    start = clock()
    for _ in range(calls):
        fn()
    if cuda:
        torch.cuda.synchronize()
    return (clock() - start) / calls * 1e6


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--route", default="default", choices=["default", "pg"])
    p.add_argument("--clock", default="wall", choices=["wall", "thread"],
                   help="thread: the calling thread's CPU time, which time slices lost to other "
                        "processes do not inflate (the engine thread's work is not in it)")
    args = p.parse_args()
    if args.route == "pg":
        prefer_process_group()
    noop_class = NoopProcessGroup if process_group_route() else NoopBackend
    dist.Backend.register_backend("noop", lambda store, rank, size, timeout: noop_class(
        rank, size), devices=["cpu", "cuda"])
    if "RANK" not in os.environ:
        os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1")
        with __import__("socket").socket() as s:
            s.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(s.getsockname()[1])
    cuda = args.device == "cuda"
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("perseus", timeout=datetime.timedelta(seconds=120))
    ranks = list(range(dist.get_world_size()))
    noop = dist.new_group(ranks, backend="noop")
    t = torch.ones(1, device="cuda" if cuda else "cpu")
    world = dist.group.WORLD
    b = world if process_group_route() else world._get_backend(t.device)
    nb = noop if process_group_route() else noop._get_backend(t.device)
    sync = _options(False)
    rows = {"floor": lambda: dist.all_reduce(t, group=noop),
            "whole": lambda: dist.all_reduce(t, group=world),
            "floor-direct": lambda: nb.allreduce([t], sync).wait()}
    python_path = getattr(b, "_dist_allreduce", None) is not None
    if python_path:
        rows["whole-py"] = rows["whole"]
    rows.update(stages(b, t))
    for name, fn in rows.items():  # warm-up, and every rank makes the same calls
        with entry_off(b, name == "whole-py"):
            for _ in range(200):
                fn()
    if python_path:
        taken = b._dist_allreduce([t], sync, b._fast) is not NotImplemented
        if dist.get_rank() == 0:
            print("the C entry %s this tensor" % ("takes" if taken else "leaves"))
    times = {name: [] for name in rows}
    clock = time.thread_time if args.clock == "thread" else time.perf_counter
    for _ in range(args.rounds):
        for name, fn in rows.items():
            dist.barrier()
            with entry_off(b, name == "whole-py"):
                times[name].append(timed(fn, args.calls, cuda, clock))
    if dist.get_rank() == 0:
        print("world size %d, %s, torch %s, %s route, %d calls x %d rounds, %s clock: us per "
              "call, fastest round (median round)"
              % (len(ranks), args.device, torch.__version__,
                 "ProcessGroup" if process_group_route() else "Backend", args.calls, args.rounds,
                 args.clock))
        floor, floor_direct = min(times["floor"]), min(times["floor-direct"])
        for name, ts in times.items():
            extra = ""
            if name in ("whole", "whole-py"):
                extra = "   %s - floor: +%.2f" % (name, min(ts) - floor)
            elif name == "direct":
                extra = "   direct - floor-direct: +%.2f" % (min(ts) - floor_direct)
            print("  %-16s %7.2f (%7.2f)%s" % (name, min(ts), statistics.median(ts), extra))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
