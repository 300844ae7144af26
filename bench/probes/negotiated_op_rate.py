"""Negotiated small allreduces per second at N ranks (the posted lane off, so that every op goes
through negotiation, where the stall diagnosis and straggler accounting live). Rank 0 prints one
JSON line. Used by diagnosis_cost.sh.

    perseusrun -np 2 python bench/probes/negotiated_op_rate.py --ops 3000
"""
import argparse
import json
import os
import time

os.environ.setdefault("PERSEUS_POSTED_ALLREDUCE", "0")

import torch  # noqa: E402

import perseus.torch as hvd  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ops", type=int, default=3000)
    p.add_argument("--elements", type=int, default=256)
    args = p.parse_args()
    torch.set_num_threads(1)
    hvd.init()
    t = torch.ones(args.elements)
    for _ in range(200):
        hvd.allreduce_(t, name="rate")
    start = time.perf_counter()
    for _ in range(args.ops):
        hvd.allreduce_(t, name="rate")
    elapsed = time.perf_counter() - start
    if hvd.rank() == 0:
        print(json.dumps({"ops_per_s": args.ops / elapsed, "us_per_op": 1e6 * elapsed / args.ops}))
    hvd.shutdown()


if __name__ == "__main__":
    main()
