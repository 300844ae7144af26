"""Shared helpers of the GPU timing scripts run by scripts/device_check.sh.

Every script takes --cpu: the same code on CPU tensors, tiny sizes and gloo instead of NCCL, so
that the device call's Python, launches and result lines are rehearsed on a machine without a
GPU (scripts/device_check.sh --dry-run). Results are printed as one line each,
`RESULT <step> key=value ...`, which the shell script copies into the summary.
"""

import argparse
import os
import statistics
import sys
import time

import torch


def parse(description, extra=None):
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--cpu", action="store_true", help="rehearsal: CPU tensors, tiny sizes, gloo")
    if extra:
        extra(p)
    return p.parse_args()


def device_for(args, local_rank=0):
    if args.cpu:
        return torch.device("cpu")
    return torch.device("cuda", local_rank)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_us(fn, device, reps, warmup=5):
    """Median wall time of fn() in microseconds, the device synchronized after each call, so
    the figure covers launch, the collective and completion (same rule for Perseus and torch)."""
    for _ in range(warmup):
        fn()
    sync(device)
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync(device)
        ts.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(ts)


def allreduce_phases(hvd, x, name, dev):
    """One hvd.allreduce_(x) split at its phases: returns the perf_counter() stamps before
    submission, after it, after the host wait, after the stream hand-off and after the
    output's finish, then after a device sync, and the core handle (for Handle.times())."""
    from perseus.torch import _tensors as _t
    from perseus.torch import mpi_ops as _ops
    pc = time.perf_counter
    t0 = pc()
    h = _ops.allreduce_async_(x, op=hvd.Sum, name=name)
    t1 = pc()
    pending = _t.take(h)
    pending.core.wait()
    t2 = pc()
    _ops._wait_device(pending)
    t3 = pc()
    pending.finish(pending.core)
    t4 = pc()
    sync(dev)
    t5 = pc()
    return (t0, t1, t2, t3, t4, t5), pending.core


def reps_for(nbytes):
    if nbytes <= 1 << 20:
        return 100
    if nbytes <= 64 << 20:
        return 20
    return 8


def result(step, **kv):
    fields = " ".join("%s=%s" % (k, ("%.4g" % v) if isinstance(v, float) else v)
                      for k, v in kv.items())
    print("RESULT %s %s" % (step, fields), flush=True)


def torch_dist_init(args, rank, size, port):
    """torch.distributed beside Perseus in the same process: the raw-NCCL baseline."""
    import torch.distributed as dist
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(port)
    kw = {}
    if not args.cpu:
        kw["device_id"] = torch.device("cuda", torch.cuda.current_device())
    dist.init_process_group("gloo" if args.cpu else "nccl", rank=rank, world_size=size, **kw)
    return dist


def fail(msg):
    print("CHECK FAILED: " + msg, file=sys.stderr, flush=True)
    sys.exit(3)
