"""One rank of the inductor test: the example's `collectives` function (dist.all_reduce,
funcol.all_reduce and all_gather_into_tensor) compiled with backend="inductor",
fullgraph=True, on the perseus backend; rank 0 prints one JSON line like the example's.

    torchrun --nproc-per-node 2 compile_inductor.py <compile_collectives.py>

Only that function: each inductor compile costs tens of seconds per rank on a small machine."""
import importlib.util
import json
import os
import sys

# No pool of inductor compile processes: the two ranks already fill a small machine's cores.
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

import torch  # noqa: E402
import torch._dynamo  # noqa: E402
import torch.distributed as dist  # noqa: E402


def main():
    spec = importlib.util.spec_from_file_location("example", sys.argv[1])
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    torch.set_num_threads(1)
    dist.init_process_group("perseus")
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4) + dist.get_rank()
    record = example.explain(example.collectives, x)
    torch._dynamo.reset()
    compiled = torch.compile(example.collectives, fullgraph=True, backend="inductor")
    with torch.no_grad():
        eager, result = example.collectives(x), compiled(x)
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, example.same(eager, result))
    if dist.get_rank() == 0:
        print(json.dumps(dict(record, compiled_equals_eager=everyone)), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
