"""Runs one example of python/perseus/examples/torch_distributed under several backends in the
same processes, one after the other (init_process_group, the example's run(args),
destroy_process_group), and prints on rank 0 one JSON object: backend -> the example's records.

    torchrun --nproc-per-node 2 consumer_compare.py gloo,perseus <example.py> [example args]

One launch for the reference and the backend under test: the launch is most of the cost.
"""
import importlib.util
import json
import sys

import torch
import torch.distributed as dist


def load(path):
    spec = importlib.util.spec_from_file_location("example", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main():
    torch.set_num_threads(1)
    backends, example, rest = sys.argv[1].split(","), load(sys.argv[2]), sys.argv[3:]
    args = example.parser().parse_args(rest)
    results = {}
    for backend in backends:
        args.backend = backend
        dist.init_process_group(backend)
        results[backend] = example.run(args)
        rank = dist.get_rank()
        dist.destroy_process_group()
    if rank == 0:
        print("RESULTS " + json.dumps(results), flush=True)


if __name__ == "__main__":
    main()
