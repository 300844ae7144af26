"""Small-tensor latency and negotiation cost through a library's asynchronous path, from
Python, for Horovod and Perseus alike (`import horovod.torch` / `import perseus.torch`, the same
calls):

    horovodrun --gloo -np 2 -H localhost:2 python bench/peers/hvd_async_bench.py latency
    perseusrun -np 2 python bench/peers/hvd_async_bench.py --library perseus negotiation

latency:      a 4-byte allreduce_async_ + synchronize loop, one op at a time; per-op median
              (max over ranks) of batches of back-to-back ops.
negotiation:  a step submits T small named tensors (allreduce_async_ of 4 floats each, as
              DistributedOptimizer's gradient hooks do), then synchronizes them all; T = 1,
              10, 100, 1000. The payload is T x 16 B, so the step time is the engine's
              per-step cost: enqueue, negotiating T tensors, fusion, completion. Rows give
              the step time, the submission time (Python loop alone), "engine" (from the
              last enqueue of the last rank to finish submitting until the last rank saw the
              last tensor complete: what negotiation, fusion and the collective add after
              every rank's framework has handed everything over; "engine_own" measures from
              each rank's own last enqueue instead, so it also holds the ranks' skew) and
              "completion" (the Python synchronize() calls for the T handles, linear in T
              for any library: framework-side cost like submission).
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch


def import_hvd(library):
    if library == "perseus":
        import perseus.torch as hvd
    else:
        import horovod.torch as hvd
    return hvd


def max_over_ranks(hvd, value):
    t = torch.tensor([value], dtype=torch.float64)
    return hvd.allreduce(t, op=hvd.Max, name="bench.max").item()


def agreed_count(hvd, per_iter_s, seconds, least=5):
    """How many iterations fill `seconds`, the same on every rank: each rank must submit the
    same named ops, or Horovod and Perseus alike wait for the missing ones."""
    return int(max_over_ranks(hvd, max(least, seconds / max(per_iter_s, 1e-9))))


def latency(hvd, args, label):
    x = torch.ones(1)
    batch = 50

    def one():
        hvd.synchronize(hvd.allreduce_async_(x, op=hvd.Sum, name="lat"))

    t0 = time.perf_counter()
    for _ in range(args.warmup_ops):
        one()
    batches = agreed_count(hvd, (time.perf_counter() - t0) / args.warmup_ops * batch,
                           args.seconds)
    per_op = []
    for _ in range(batches):
        t0 = time.perf_counter()
        for _ in range(batch):
            one()
        per_op.append((time.perf_counter() - t0) / batch)
    per_op.sort()
    med = max_over_ranks(hvd, statistics.median(per_op))
    p90 = max_over_ranks(hvd, per_op[int(0.9 * (len(per_op) - 1))])
    if hvd.rank() == 0:
        print(json.dumps({"library": label, "collective": "async-latency", "api": "python",
                          "ranks": hvd.size(), "bytes": 4, "time_us": med * 1e6,
                          "p90_us": p90 * 1e6, "iters": len(per_op) * batch}), flush=True)


def label_is_perseus(hvd):
    return hvd.__name__.startswith("perseus")


def negotiation(hvd, args, label):
    for count in args.tensors:
        tensors = [torch.ones(4) for _ in range(count)]
        # Shared across counts: 1000 names in all, within both response caches (1024).
        names = ["neg.%d" % i for i in range(count)]

        def step():
            t0 = time.perf_counter()
            handles = [hvd.allreduce_async_(t, op=hvd.Sum, name=n)
                       for t, n in zip(tensors, names)]
            t1 = time.perf_counter()
            # The last tensor enqueued is the last to become ready on every rank, so it is
            # the last one negotiated and run (both libraries fuse and complete in order).
            hvd.synchronize(handles[-1])
            t2 = time.perf_counter()
            for h in handles[:-1]:
                hvd.synchronize(h)
            return time.perf_counter() - t0, t1 - t0, t2 - t1, t1, t2

        def core_step():
            """Perseus only: the same step, timed by the engine's own stamps of the last
            tensor (Handle.times(): submission and completion, on perf_counter's clock), so
            the Python calls around synchronize, which run with caches cooled by the loop,
            stay out of it. Returns (submitted, completed) of the last tensor."""
            handles = [hvd.allreduce_async_(t, op=hvd.Sum, name=n)
                       for t, n in zip(tensors, names)]
            core = hvd.mpi_ops._t.lookup(handles[-1]).core
            hvd.synchronize(handles[-1])  # first, as step() does
            for h in handles[:-1]:
                hvd.synchronize(h)
            return core.times()

        t0 = time.perf_counter()
        for _ in range(args.warmup_steps):
            step()
        count_steps = agreed_count(hvd, (time.perf_counter() - t0) / args.warmup_steps,
                                   args.seconds)
        steps, submits, engines, handed, finished = [], [], [], [], []
        stats = getattr(hvd, "engine_stats", None)  # Perseus only: the engine's own counters
        counted = {}
        for _ in range(count_steps):
            hvd.barrier()
            before = stats() if stats else None
            s, sub, eng, t_handed, t_finished = step()
            if stats:
                after = stats()
                for k in after:
                    counted[k] = counted.get(k, 0) + after[k] - before[k]
            steps.append(s)
            submits.append(sub)
            engines.append(eng)
            handed.append(t_handed)
            finished.append(t_finished)
        core_stamps = []
        if label_is_perseus(hvd):
            for _ in range(count_steps):
                hvd.barrier()
                core_stamps.extend(core_step())
        step_s = max_over_ranks(hvd, statistics.median(steps))
        submit_s = max_over_ranks(hvd, statistics.median(submits))
        own_engine_s = max_over_ranks(hvd, statistics.median(engines))
        # The engine can run a tensor only once every rank has submitted it: per step, from
        # the last rank's last enqueue to the last rank's completion. perf_counter is
        # CLOCK_MONOTONIC, one clock for every process of a host (the ranks here share one).
        n = len(handed)
        stamps = hvd.allgather(torch.tensor([handed + finished], dtype=torch.float64))
        per_step = [max(stamps[r, n + i].item() for r in range(hvd.size())) -
                    max(stamps[r, i].item() for r in range(hvd.size())) for i in range(n)]
        engine_s = max(0.0, statistics.median(per_step))
        extra = {}
        if core_stamps:
            # From the last rank's submission of the last tensor to the last rank's completion
            # of it, both as the engines saw them: what negotiating T tensors (none, once
            # posted), fusion and the collective add to the step.
            m = len(core_stamps) // 2
            cs = hvd.allgather(torch.tensor([core_stamps], dtype=torch.float64))
            lags = [max(cs[r, 2 * i + 1].item() for r in range(hvd.size())) -
                    max(cs[r, 2 * i].item() for r in range(hvd.size())) for i in range(m)]
            extra["engine_core_us"] = max(0.0, statistics.median(lags)) * 1e6
        if hvd.rank() == 0:
            print(json.dumps({
                "library": label, "collective": "negotiation", "ranks": hvd.size(),
                "tensors": count, "bytes": count * 16, "time_us": step_s * 1e6,
                "submit_us": submit_s * 1e6, "engine_us": engine_s * 1e6,
                "engine_own_us": own_engine_s * 1e6,
                "completion_us": max(0.0, step_s - submit_s - engine_s) * 1e6,
                "per_tensor_us": step_s * 1e6 / count, "steps": len(steps), **extra,
                **({"engine_stats_per_step": {k: v / len(steps) for k, v in counted.items()}}
                   if counted else {})}), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=("latency", "negotiation", "all"))
    p.add_argument("--library", default="horovod", choices=("horovod", "perseus"))
    p.add_argument("--label", default=None, help="library name in the JSON rows")
    p.add_argument("--seconds", type=float, default=float(os.environ.get("BENCH_SECONDS", 3)),
                   help="measuring time per figure")
    p.add_argument("--warmup-ops", type=int, default=200)
    p.add_argument("--warmup-steps", type=int, default=5)
    p.add_argument("--tensors", type=lambda s: [int(v) for v in s.split(",")],
                   default=[1, 10, 100, 1000])
    args = p.parse_args()
    torch.set_num_threads(1)
    hvd = import_hvd(args.library)
    hvd.init()
    label = args.label or args.library
    if args.mode in ("latency", "all"):
        latency(hvd, args, label)
    if args.mode in ("negotiation", "all"):
        negotiation(hvd, args, label)
    hvd.shutdown()


if __name__ == "__main__":
    sys.exit(main())
