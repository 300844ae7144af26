"""Runs one example of python/perseus/examples/torch_distributed under several backends in the
same processes, one after the other (init_process_group, the example's run(args),
destroy_process_group), and prints on rank 0 one JSON object: backend -> the example's records.

    torchrun --nproc-per-node 2 consumer_compare.py gloo,perseus <example.py> [example args]

One launch for the reference and the backend under test: the launch is most of the cost.
Each init_process_group gets a store of its own (a prefix of torchrun's agent store): a second
env:// init would meet the first group's rendezvous keys, which torch does not remove.
"""
import faulthandler
import importlib.util
import json
import os
import sys

import torch
import torch.distributed as dist


def load(path):
    spec = importlib.util.spec_from_file_location("example", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main():
    # A hang ends with every rank's stack rather than with the test's timeout alone.
    faulthandler.dump_traceback_later(float(os.environ.get("CONSUMER_DEADLINE_S", "120")),
                                      exit=True)
    torch.set_num_threads(1)
    backends, example, rest = sys.argv[1].split(","), load(sys.argv[2]), sys.argv[3:]
    args = example.parser().parse_args(rest)
    results = {}
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    agent = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world,
                          is_master=False)
    for i, backend in enumerate(backends):
        args.backend = backend
        dist.init_process_group(backend, store=dist.PrefixStore("run%d/" % i, agent),
                                rank=rank, world_size=world)
        results[backend] = example.run(args)
        dist.destroy_process_group()
    if rank == 0:
        print("RESULTS " + json.dumps(results), flush=True)
    faulthandler.cancel_dump_traceback_later()
    del agent


if __name__ == "__main__":
    main()
