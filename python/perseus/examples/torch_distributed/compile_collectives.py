"""torch.compile(fullgraph=True) over collectives on the "perseus" backend: dist.all_reduce,
funcol.all_reduce and dist.all_gather_into_tensor inside one compiled function, and a model
whose forward all-reduces its activations.

A plain torch.distributed script: the only Perseus lines are `import perseus.torch` and the
backend name. Rank 0 prints one JSON line: torch._dynamo.explain's graph and graph-break
counts (and break reasons), and whether the compiled results equal the eager ones.

    torchrun --nproc-per-node 2 compile_collectives.py                 # aot_eager
    torchrun --nproc-per-node 2 compile_collectives.py --compiler inductor
    perseusrun -np 2 python compile_collectives.py
"""
import argparse
import json

import torch
import torch._dynamo
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch.nn as nn

import perseus.torch  # noqa: F401  (registers the "perseus" backend)


def collectives(x):
    y = x * 2
    dist.all_reduce(y)  # in place: dynamo turns it into a functional collective
    z = funcol.all_reduce(x + 1, "sum", dist.group.WORLD)
    gathered = x.new_empty((dist.get_world_size() * x.shape[0],) + tuple(x.shape[1:]))
    dist.all_gather_into_tensor(gathered, x)
    return y + z, gathered


class AllReducedMLP(nn.Module):
    """A forward that averages its hidden activations over the ranks (as tensor-parallel
    layers do)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = nn.Linear(16, 32), nn.Linear(32, 4)

    def forward(self, x):
        h = funcol.all_reduce(torch.relu(self.a(x)), "avg", dist.group.WORLD)
        return self.b(h)


def explain(fn, *args):
    out = torch._dynamo.explain(fn)(*args)
    return {"graphs": out.graph_count, "graph_breaks": out.graph_break_count,
            "break_reasons": [str(r.reason) for r in out.break_reasons]}


def same(a, b):
    if isinstance(a, (tuple, list)):
        return all(same(x, y) for x, y in zip(a, b))
    return bool(torch.equal(a, b))


def parser():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", default="perseus")
    p.add_argument("--compiler", default="aot_eager", help="torch.compile backend")
    return p


def run(args):
    rank = dist.get_rank()
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4) + rank
    model, inputs = AllReducedMLP(), torch.randn(5, 16, generator=torch.Generator().manual_seed(rank))
    records = []
    for name, fn, arg in (("collectives", collectives, x), ("model", model, inputs)):
        torch._dynamo.reset()
        explained = explain(fn, arg)
        torch._dynamo.reset()
        compiled = torch.compile(fn, fullgraph=True, backend=args.compiler)
        with torch.no_grad():
            eager, result = fn(arg), compiled(arg)
        everyone = [None] * dist.get_world_size()
        dist.all_gather_object(everyone, same(eager, result))
        records.append(dict(explained, what=name, compiler=args.compiler,
                            compiled_equals_eager=everyone))
    return records


def main():
    args = parser().parse_args()
    dist.init_process_group(args.backend)
    for record in run(args):
        if dist.get_rank() == 0:
            print(json.dumps(dict(record, backend=args.backend)), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
