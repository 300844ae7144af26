"""The last tensor's lag in the negotiation step, per step and split by rank (the probe behind
docs/algorithms.md, *Posted collectives*):

    perseusrun -np 2 python bench/probes/negotiation_lag_probe.py [--tensors 10,1000] [--steps N]

Each step submits T named 16-byte allreduce_async_ (as bench/peers/hvd_async_bench.py's
negotiation mode does), synchronizes the last handle first, then the others. From the engines'
own stamps of the last tensor (Handle.times(), CLOCK_MONOTONIC, shared by the ranks of a host):
the lag from the last rank's submission to the last rank's completion (the benchmark's
*engine (core)*), printed as 15 quantiles and the median, and its split: how far apart the
ranks submitted it, when the first rank began waiting, and when each rank completed it.
"""
import argparse
import statistics
import time

import torch

import perseus.torch as hvd


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tensors", type=lambda s: [int(v) for v in s.split(",")], default=[10, 1000])
    p.add_argument("--steps", type=int, default=0, help="0: max(30, 3000 / tensors)")
    args = p.parse_args()
    hvd.init()
    torch.set_num_threads(1)
    for count in args.tensors:
        tensors = [torch.ones(4) for _ in range(count)]
        names = ["neg.%d" % i for i in range(count)]
        steps = args.steps or max(30, 3000 // count)
        records = []
        for step in range(5 + steps):  # 5 warm-up steps: names get their slots
            hvd.barrier()
            handles = [hvd.allreduce_async_(t, op=hvd.Sum, name=n) for t, n in zip(tensors, names)]
            core = hvd.mpi_ops._t.lookup(handles[-1]).core
            waited = time.perf_counter()
            hvd.synchronize(handles[-1])
            for h in handles[:-1]:
                hvd.synchronize(h)
            submitted, completed = core.times()
            if step >= 5:
                records += [submitted, completed, waited]
        stamps = hvd.allgather(torch.tensor([records], dtype=torch.float64))
        lags, splits = [], []
        for i in range(len(records) // 3):
            sub = [stamps[r, 3 * i].item() for r in range(hvd.size())]
            done = [stamps[r, 3 * i + 1].item() for r in range(hvd.size())]
            wait = [stamps[r, 3 * i + 2].item() for r in range(hvd.size())]
            last = max(range(hvd.size()), key=lambda r: sub[r])
            first = min(range(hvd.size()), key=lambda r: sub[r])
            lags.append((max(done) - sub[last]) * 1e6)
            splits.append(((sub[last] - sub[first]) * 1e6, (wait[first] - sub[last]) * 1e6,
                           (done[first] - sub[last]) * 1e6, (done[last] - sub[last]) * 1e6))
        if hvd.rank() == 0:
            q = sorted(lags)[::max(1, len(lags) // 15)]
            med = [statistics.median(c) for c in zip(*splits)]
            print(f"{count} tensors, {len(lags)} steps: lag quantiles (us) "
                  + " ".join("%.1f" % v for v in q), flush=True)
            print(f"{count} tensors: median lag {statistics.median(lags):.2f} us; medians of the "
                  f"split (us): ranks' submissions apart {med[0]:.2f}, first rank's wait began "
                  f"{med[1]:.2f} after the last submission, first rank completed {med[2]:.2f} "
                  f"after it, last rank {med[3]:.2f}", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
