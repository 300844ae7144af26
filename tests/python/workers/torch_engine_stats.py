"""perseus.torch.engine_stats(): after the first steps have negotiated a set of names, further
steps of the same names skip the coordinator. With PERSEUS_POSTED_ALLREDUCE=0 they go through
the response cache: no coordinator round, one control AND per cycle whatever the tensor count.
By default, ranks on one host post these small allreduces and negotiate nothing at all (Note
[Posted collectives])."""
import os
import sys

import torch

import perseus.torch as hvd


def step(tensors):
    handles = [hvd.allreduce_async_(t, op=hvd.Sum, name="stats.%d" % i)
               for i, t in enumerate(tensors)]
    for h in handles:
        hvd.synchronize(h)


def main():
    hvd.init()
    tensors = [torch.ones(3) for _ in range(200)]
    # The first step negotiates the 200 names through the coordinator, the second through the
    # response cache, and gives each name its slot (a name used once gets none).
    step(tensors)
    step(tensors)
    hvd.barrier()
    before = hvd.engine_stats()
    steps = 5
    for _ in range(steps):
        for t in tensors:
            t.fill_(1.0)
        step(tensors)
    after = hvd.engine_stats()
    diff = {k: after[k] - before[k] for k in after}
    assert all(float(t[0]) == hvd.size() for t in tensors)
    if os.environ.get("PERSEUS_POSTED_ALLREDUCE", "1") != "0":
        assert diff["posted_allreduces"] == steps * len(tensors), diff
        assert diff["posted_collectives"] == diff["posted_allreduces"], diff
        assert diff["cached_responses"] == 0 and diff["coordinated_responses"] == 0, diff
        assert diff["control_exchanges"] <= 1, diff  # at most a stall check
        # Small broadcasts, allgathers and reducescatters are posted as well, after two
        # negotiated runs each.
        x = torch.full((4,), float(hvd.rank()))
        piece = torch.full((hvd.rank() + 1, 2), float(hvd.rank()))
        full = torch.ones(2 * hvd.size(), 3)
        for k in range(4):
            hvd.broadcast_(x, root_rank=1, name="stats.b")
            gathered = hvd.allgather(piece, name="stats.g")
            scattered = hvd.reducescatter(full, op=hvd.Sum, name="stats.s")
        assert x.tolist() == [1.0] * 4, x
        assert gathered.shape[0] == hvd.size() * (hvd.size() + 1) // 2, gathered.shape
        assert gathered[-1, 0].item() == hvd.size() - 1, gathered
        assert scattered.shape == (2, 3) and scattered.eq(hvd.size()).all(), scattered
        posted = hvd.engine_stats()["posted_collectives"] - after["posted_collectives"]
        assert posted == 3 * 2, posted
        # Unnamed blocking calls repeat their kind's and op's name (perseus.common.names):
        # an averaged loss and a summed count, alternated, are each posted from their third.
        start = hvd.engine_stats()["posted_allreduces"]
        for k in range(5):
            loss = hvd.allreduce(torch.tensor(float(hvd.rank())))
            assert loss.item() == (hvd.size() - 1) / 2, loss
            t = torch.ones(1)
            hvd.allreduce_(t, op=hvd.Sum)
            assert t.item() == hvd.size(), t
        unnamed = hvd.engine_stats()["posted_allreduces"] - start
        assert unnamed == 2 * 3, unnamed
        print("PASS engine_stats rank %d: %s" % (hvd.rank(), diff), flush=True)
        hvd.shutdown()
        return 0
    assert diff["posted_allreduces"] == 0, diff
    assert diff["cached_responses"] == steps * len(tensors), diff
    assert diff["coordinated_responses"] == 0, diff
    assert diff["coordinator_rounds"] <= 1, diff  # at most a stall check
    assert 1 <= diff["control_exchanges"] <= diff["cycles"] + 1, diff
    # 200 cached names: the control vector is 200 ready bits + 200 invalid bits + 2 words.
    assert diff["control_bytes"] <= diff["control_exchanges"] * (2 + 2 * 4) * 8, diff
    assert diff["negotiation_ns"] > 0, diff
    print("PASS engine_stats rank %d: %s" % (hvd.rank(), diff), flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    sys.exit(main())
