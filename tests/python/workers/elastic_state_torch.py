"""hvd.elastic state on real ranks (fixed membership, or an elastic job): the first sync,
commit/restore, run() retrying after PerseusInternalError with a reset, the sync source chosen
by the ranks' commits, HostsUpdatedInterrupt's skip_sync, reset callbacks, and TorchState with
SGD momentum, Adam and an ElasticSampler. Prints 'PASS <check>' after each check."""

import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

import perseus.torch as hvd
from perseus.common.exceptions import PerseusInternalError

from elastic_state_common import REAL_RESET, elastic_runner, run_checks
from elastic_state_common import everyone_equal as _equal

elastic_run, RESETS = elastic_runner(hvd)


def make(opt_kind, seed):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
    if opt_kind == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=0.01)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=0.01)
    return model, hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())


def step(model, opt, seed):
    g = torch.Generator().manual_seed(seed * 100 + hvd.rank())
    x, y = torch.randn(8, 6, generator=g), torch.randint(0, 3, (8,), generator=g)
    opt.zero_grad()
    F.cross_entropy(model(x), y).backward()
    opt.step()


def local_step(model, opt):
    """A step on this rank alone: gradients set by hand (no backward, so no allreduce hook
    fires) and the wrapped optimizer's own step."""
    for p in model.parameters():
        p.grad = torch.full_like(p, 0.25)
    super(type(opt), opt).step()


def snapshot(model, opt):
    return copy.deepcopy(model.state_dict()), copy.deepcopy(opt.state_dict())


def same(a, b):
    """Nested state dicts (tensors, numbers, lists) equal."""
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if torch.is_tensor(a):
        return torch.equal(a, b)
    return a == b


def everyone_equal(obj):
    return _equal(hvd, same, obj)


def check_first_sync_from_rank_0(opt_kind):
    model, opt = make(opt_kind, seed=10 + hvd.rank())  # a different model on every rank
    step(model, opt, seed=1)  # and optimizer state (momentum / Adam moments) too
    rank0 = hvd.broadcast_object(snapshot(model, opt), root_rank=0)
    state = hvd.elastic.TorchState(model, opt, epoch=hvd.rank())

    @elastic_run
    def train(state):
        assert state.sync_root == 0
        assert same(snapshot(state.model, state.optimizer), rank0)
        assert state.epoch == 0
        return "done"
    assert train(state) == "done"
    return state


def check_commit_restore(opt_kind):
    model, opt = make(opt_kind, seed=3)
    state = hvd.elastic.TorchState(model, opt, epoch=0, batch=0)

    @elastic_run
    def train(state):
        step(state.model, state.optimizer, seed=2)
        state.epoch, state.batch = 1, 5
        state.commit()
        committed = snapshot(state.model, state.optimizer)
        step(state.model, state.optimizer, seed=3)
        state.epoch, state.batch = 2, 0
        assert not same(snapshot(state.model, state.optimizer), committed)
        state.restore()
        assert same(snapshot(state.model, state.optimizer), committed)
        assert (state.epoch, state.batch) == (1, 5)
        # The restored optimizer still trains, and identically everywhere.
        step(state.model, state.optimizer, seed=4)
        assert everyone_equal(snapshot(state.model, state.optimizer))
    train(state)


def check_retry_after_internal_error_syncs_from_newest_commit(opt_kind):
    """Every rank commits once, rank 1 commits once more (as if the others failed before
    their commit completed), every rank fails: run() resets, restores each rank's last commit
    and syncs from rank 1, the lowest rank holding the newest commit."""
    model, opt = make(opt_kind, seed=4)
    state = hvd.elastic.TorchState(model, opt, epoch=0)
    resets, entries, newest = [], [], {}
    state.register_reset_callbacks([lambda: resets.append(hvd.size())])

    @elastic_run
    def train(state):
        entries.append(state.sync_root)
        if len(entries) == 1:
            step(state.model, state.optimizer, seed=5)
            state.epoch = 1
            state.commit()
            if hvd.rank() == 1:
                local_step(state.model, state.optimizer)
                state.epoch = 2
                state.save()
                state._commits += 1  # what commit() counts, without its collective check
                newest["rank1"] = snapshot(state.model, state.optimizer)
            step(state.model, state.optimizer, seed=7)  # uncommitted: undone by restore
            state.epoch = 99
            raise PerseusInternalError("simulated loss of a peer")
        return snapshot(state.model, state.optimizer)

    before = len(RESETS)
    result = train(state)
    assert entries == [0, 1], entries
    assert REAL_RESET or len(RESETS) == before + 1, RESETS
    assert resets == [hvd.size()], resets
    assert state.epoch == 2
    rank1 = hvd.broadcast_object(newest.get("rank1"), root_rank=1, name="newest")
    assert same(result, rank1)
    assert everyone_equal(result)


def check_hosts_updated_interrupt():
    """skip_sync=True on every rank: reset without a sync; skip_sync=False: a sync."""
    state = hvd.elastic.ObjectState(value=hvd.rank())
    syncs, entries = [], []
    real_sync = state.sync
    state.sync = lambda: (syncs.append(len(entries)), real_sync())

    @elastic_run
    def train(state, skip):
        entries.append(state.value)
        if len(entries) == 1:
            state.value = 10 + hvd.rank()
            state.commit()
            raise hvd.HostsUpdatedInterrupt(skip_sync=skip)
        return state.value

    assert train(state, True) == 10 + hvd.rank()
    assert syncs == [0], syncs  # the first entry's only: nobody asked after the interrupt
    entries.clear()
    syncs.clear()
    assert train(state, False) == 10  # rank 0's committed value, synced after the interrupt
    assert syncs == [0, 1], syncs


def check_object_state():
    state = hvd.elastic.ObjectState(epoch=hvd.rank(), names=["r%d" % hvd.rank()])

    @elastic_run
    def train(state, extra):
        assert (state.epoch, state.names) == (0, ["r0"])
        state.epoch, state.names = 3, state.names + [extra]
        state.commit()
        state.epoch = 4
        state.restore()
        return state.epoch, state.names
    assert train(state, "x") == (3, ["r0", "x"])


def check_sampler_in_state():
    data = list(range(40))
    sampler = hvd.elastic.ElasticSampler(data, shuffle=True, seed=5)
    state = hvd.elastic.TorchState(sampler=sampler, epoch=0)
    seen = []

    @elastic_run
    def train(state):
        batches = list(torch.utils.data.DataLoader(data, batch_size=2, sampler=state.sampler))
        if not seen:
            for i, b in enumerate(batches[:3]):
                seen.extend(b.tolist())
                state.sampler.record_batch(i, 2)
                if i == 1:
                    state.commit()
            raise PerseusInternalError("simulated failure after an uncommitted batch")
        return [i for b in batches for i in b.tolist()]

    rest = train(state)
    assert state.sampler.processed_num == 2 * 2 * hvd.size()
    done = hvd.allgather_object(seen[:4])
    left = hvd.allgather_object(rest)
    processed = {i for d in done for i in d}
    remaining = [i for r in left for i in r]
    assert processed.isdisjoint(remaining)
    assert set(remaining) | processed == set(data)


def main():
    hvd.init()
    checks = [
        ("first_sync_sgd", lambda: check_first_sync_from_rank_0("sgd")),
        ("first_sync_adam", lambda: check_first_sync_from_rank_0("adam")),
        ("commit_restore_sgd", lambda: check_commit_restore("sgd")),
        ("commit_restore_adam", lambda: check_commit_restore("adam")),
        ("retry_newest_sgd",
         lambda: check_retry_after_internal_error_syncs_from_newest_commit("sgd")),
        ("retry_newest_adam",
         lambda: check_retry_after_internal_error_syncs_from_newest_commit("adam")),
        ("hosts_updated", check_hosts_updated_interrupt),
        ("object_state", check_object_state),
        ("sampler", check_sampler_in_state),
    ]
    run_checks(hvd, checks)


if __name__ == "__main__":
    main()
