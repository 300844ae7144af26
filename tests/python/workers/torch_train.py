"""DistributedOptimizer on 2 ranks matches single-process training on the concatenated batch;
broadcast_parameters and broadcast_optimizer_state make ranks equal."""

import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

import perseus.torch as hvd


def make_model():
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 5))


def batches(steps, per_rank, size):
    g = torch.Generator().manual_seed(7)
    return [(torch.randn(per_rank * size, 1, 8, 8, generator=g),
             torch.randint(0, 5, (per_rank * size,), generator=g)) for _ in range(steps)]


def train(model, opt, data, rank, per_rank, passes=1):
    for x, y in data:
        local_x, local_y = x[rank * per_rank:(rank + 1) * per_rank], y[rank * per_rank:(rank + 1) * per_rank]
        chunk = per_rank // passes
        for p in range(passes):
            sl = slice(p * chunk, (p + 1) * chunk)
            loss = F.cross_entropy(model(local_x[sl]), local_y[sl]) / passes
            loss.backward()
        opt.step()
        opt.zero_grad()


def reference(data, init_state, lr):
    model = make_model()
    model.load_state_dict(init_state)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    for x, y in data:
        F.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad()
    return model


def check(name, model, ref, atol):
    for (n, p), q in zip(model.named_parameters(), ref.parameters()):
        assert torch.allclose(p, q, atol=atol), (name, n, (p - q).abs().max().item())


def main():
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    per_rank, lr = 4, 0.1

    # broadcast_parameters: different seeds, then rank 0's weights everywhere.
    torch.manual_seed(100 + rank)
    base = make_model()
    hvd.broadcast_parameters(base.state_dict(), root_rank=0)
    gathered = hvd.allgather_object([p.detach().clone() for p in base.parameters()])
    assert all(torch.equal(a, b) for other in gathered for a, b in zip(other, gathered[0]))
    init_state = copy.deepcopy(base.state_dict())
    data = batches(3, per_rank, size)
    ref = reference(data, init_state, lr)

    configs = [("plain", {}, 1, 1e-5), ("groups", {"groups": 2}, 1, 1e-5),
               ("passes", {"backward_passes_per_step": 2}, 2, 1e-5),
               ("predivide", {"gradient_predivide_factor": 2.0}, 1, 1e-5),
               ("fp16", {"compression": hvd.Compression.fp16}, 1, 5e-3)]
    for name, kwargs, passes, atol in configs:
        model = make_model()
        model.load_state_dict(init_state)
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9),
                                       named_parameters=model.named_parameters(), **kwargs)
        train(model, opt, data, rank, per_rank, passes)
        check(name, model, ref, atol)
        print("PASS optimizer", name, flush=True)

    # skip_synchronize + explicit synchronize (gradient clipping pattern)
    model = make_model()
    model.load_state_dict(init_state)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9),
                                   named_parameters=model.named_parameters())
    for x, y in data:
        sl = slice(rank * per_rank, (rank + 1) * per_rank)
        F.cross_entropy(model(x[sl]), y[sl]).backward()
        opt.synchronize()
        with opt.skip_synchronize():
            opt.step()
        opt.zero_grad()
    check("skip_synchronize", model, ref, 1e-5)

    # zero_grad between backward and step is refused
    F.cross_entropy(model(data[0][0][:2]), data[0][1][:2]).backward()
    try:
        opt.zero_grad()
        raise SystemExit("zero_grad before step did not raise")
    except AssertionError:
        pass
    opt.synchronize()
    opt.zero_grad()

    # Duplicate parameter names are refused.
    try:
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                 named_parameters=[("a", p) for p in model.parameters()])
        raise SystemExit("duplicate names accepted")
    except ValueError:
        pass

    # broadcast_optimizer_state: Adam moments from rank 0.
    model = make_model()
    model.load_state_dict(init_state)
    adam = torch.optim.Adam(model.parameters(), lr=0.01 * (rank + 1))
    F.cross_entropy(model(data[0][0] * (rank + 1)), data[0][1]).backward()
    adam.step()
    hvd.broadcast_optimizer_state(adam, root_rank=0)
    states = hvd.allgather_object(adam.state_dict())
    assert states[0]["param_groups"][0]["lr"] == states[1]["param_groups"][0]["lr"] == 0.01
    for k, v in states[0]["state"].items():
        assert torch.equal(v["exp_avg"], states[1]["state"][k]["exp_avg"])
    hvd.shutdown()
    print("PASS train", flush=True)


if __name__ == "__main__":
    main()
