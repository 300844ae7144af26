"""Step (b): perseus.torch allreduce at world size 1 (NCCL path) vs torch.distributed NCCL at
world size 1, same process, same tensors, same timing rule (common.median_us).

Then a breakdown of one Perseus call (`b_w1_split`), so that the gap to torch has names: each
phase of hvd.allreduce_ timed with perf_counter inside one loop (medians per phase), plus the
pieces of the submit path timed alone, the same round trip on a CPU tensor (engine and Python
with no GPU call), and torch's launch and synchronize apart. Phases of one call:
  submit    allreduce_async_: Python checks, DLPack capsule, current stream, _core.allreduce
            (the engine records the ready event on the caller's thread and queues the entry)
  wait      core handle wait: the engine thread wakes, negotiates (size 1), enqueues the
            stream wait + NCCL + done event, polls the event, completes the handle
  stream    cuda_stream_wait of the current stream on the done event
  finish    the Python result
  sync      torch.cuda.synchronize()"""

import statistics
import time

import torch

import common
import perseus.torch as hvd
from perseus.common.names import op_name
from perseus.torch import _tensors as _t


def phases(x, name, dev, reps):
    """Median microseconds of each phase of hvd.allreduce_(x) (see the module doc)."""
    cols = {k: [] for k in ("submit", "wait", "stream", "finish", "sync", "total")}
    for i in range(reps + 5):
        common.sync(dev)
        (t0, t1, t2, t3, t4, t5), _ = common.allreduce_phases(hvd, x, name, dev)
        if i >= 5:
            for k, a, b in (("submit", t0, t1), ("wait", t1, t2), ("stream", t2, t3),
                            ("finish", t3, t4), ("sync", t4, t5), ("total", t0, t5)):
                cols[k].append((b - a) * 1e6)
    return {k: statistics.median(v) for k, v in cols.items()}


def alone_us(fn, reps):
    """Median microseconds of fn() with no device sync (host-side pieces)."""
    for _ in range(5):
        fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(ts)


def breakdown(x, dev, reps, dist):
    split = phases(x, "ar.w1.split", dev, reps)
    # Pieces of the submit path, alone.
    pieces = {
        "capsule_us": alone_us(lambda: _t.capsule(x), reps),
        "stream_of_us": alone_us(lambda: _t.stream_of(x), reps),
        "op_name_us": alone_us(lambda: op_name("allreduce", "ar.w1.split", 0), reps),
        "empty_sync_us": alone_us(lambda: common.sync(dev), reps),
    }
    if dev.type == "cuda":
        # What stream_of cost before it used torch's raw stream getter.
        pieces["current_stream_obj_us"] = alone_us(
            lambda: torch.cuda.current_stream(dev).cuda_stream, reps)
    # The same round trip on a 1-element CPU tensor: Python + engine without any CUDA call.
    c = torch.ones(1)
    cpu = phases(c, "ar.w1.cpu", torch.device("cpu"), reps)
    # torch.distributed: the launch (all_reduce returns once enqueued) and the synchronize.
    launch = []
    for i in range(reps + 5):
        common.sync(dev)
        t0 = time.perf_counter()
        dist.all_reduce(x)
        t1 = time.perf_counter()
        common.sync(dev)
        if i >= 5:
            launch.append((t1 - t0) * 1e6)
    kv = {"bytes": x.numel() * x.element_size()}
    kv.update({k + "_us": v for k, v in split.items()})
    kv.update(pieces)
    kv["cpu_submit_us"] = cpu["submit"]
    kv["cpu_wait_us"] = cpu["wait"]
    kv["cpu_total_us"] = cpu["total"]
    kv["torch_launch_us"] = statistics.median(launch)
    common.result("b_w1_split", **kv)


def per_call(x, dev, dist, calls, samples=7):
    """`b_percall_w1`: the per-call cost of a 4-B allreduce_ issued back to back (`calls` per
    sample, one device sync at the end), Perseus and torch's NCCL alternated per sample."""
    def sample(fn):
        common.sync(dev)
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        common.sync(dev)
        return (time.perf_counter() - t0) * 1e6 / calls

    perseus = lambda: hvd.allreduce_(x, op=hvd.Sum, name="ar.w1.percall")  # noqa: E731
    torch_nccl = lambda: dist.all_reduce(x)  # noqa: E731
    sample(perseus), sample(torch_nccl)  # warm-up
    p, t = [], []
    for _ in range(samples):
        p.append(sample(perseus))
        t.append(sample(torch_nccl))
    common.result("b_percall_w1", bytes=x.numel() * x.element_size(), calls=calls,
                  perseus_us=statistics.median(p), torch_us=statistics.median(t),
                  perseus_min_us=min(p), perseus_max_us=max(p))


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
        # At world size 1 neither library moves bytes, so every size costs about the same:
        # many short rounds, Perseus and torch interleaved, so that both see the same machine
        # state; the figure is the median over rounds of each round's median.
        reps, rounds = (10, 2) if args.cpu else (200, 9)
        # Sum at world size 1 leaves the values as they are: checked after the timed loops.
        name = "ar.w1.%d" % nbytes
        p_rounds, t_rounds = [], []
        for _ in range(rounds):
            p_rounds.append(common.median_us(
                lambda: hvd.allreduce_(x, op=hvd.Sum, name=name), dev, reps))
            t_rounds.append(common.median_us(lambda: dist.all_reduce(x), dev, reps))
        if not torch.equal(x, ref):
            common.fail("allreduce at world size 1 changed the tensor (%d bytes)" % nbytes)
        p_us, t_us = statistics.median(p_rounds), statistics.median(t_rounds)
        common.result("b_allreduce_w1", bytes=nbytes, perseus_us=p_us, torch_us=t_us,
                      time_ratio=p_us / t_us, rounds=rounds, reps=reps)
    x = torch.randn(1, device=dev)
    per_call(x, dev, dist, 200 if args.cpu else 2000)
    breakdown(x, dev, 30 if args.cpu else 300, dist)
    dist.destroy_process_group()
    hvd.shutdown()


if __name__ == "__main__":
    main()
