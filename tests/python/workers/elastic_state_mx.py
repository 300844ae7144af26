"""perseus.mxnet.elastic on real ranks at fixed membership: GluonState over a
DistributedTrainer and over a Trainer on a Perseus KVStore, and KVStoreState, through the
first sync, commit/restore, and run() retrying after PerseusInternalError with the sync taken
from the rank holding the newest commit. Prints 'PASS <check>' after each check."""

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

import perseus.mxnet as hvd
from perseus.common.exceptions import PeerLostError, PerseusInternalError
from perseus.mxnet import mpi_ops

from elastic_state_common import REAL_RESET, elastic_runner, run_checks
from elastic_state_common import everyone_equal as _equal

elastic_run, RESETS = elastic_runner(hvd)


def make_net(seed):
    mx.random.seed(seed)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(5, in_units=4, activation="relu"), gluon.nn.Dense(2, in_units=5))
    net.initialize(mx.init.Uniform(1.0))
    return net


def step(net, trainer, seed):
    rng = np.random.RandomState(seed * 10 + hvd.rank())
    x = mx.nd.array(rng.randn(6, 4))
    y = mx.nd.array(rng.randn(6, 2))
    with autograd.record():
        loss = ((net(x) - y) ** 2).mean()
    loss.backward()
    trainer.step(6)


def updater_states(trainer):
    kv = trainer._kvstore
    updater = kv._updater if trainer._update_on_kvstore else trainer._updaters[0]
    return {k: [a.asnumpy() for a in (v if isinstance(v, (list, tuple)) else [v])]
            for k, v in updater.states.items()}


def snapshot(net, trainer):
    params = {n: p.data().asnumpy() for n, p in sorted(net.collect_params().items())}
    return params, updater_states(trainer), trainer._optimizer.num_update


def same(a, b):
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b)
    return a == b


def everyone_equal(obj):
    return _equal(hvd, same, obj)


def make_trainer(kind, net):
    params = net.collect_params()
    if kind == "distributed":
        return hvd.DistributedTrainer(params, "sgd", {"learning_rate": 0.1, "momentum": 0.9})
    return gluon.Trainer(params, "adam", {"learning_rate": 0.01},
                         kvstore=hvd.create("dist_sync_perseus"), update_on_kvstore=True)


def check_gluon(kind):
    net = make_net(seed=20 + hvd.rank())  # different weights on every rank
    trainer = make_trainer(kind, net)
    rank0_params = hvd.broadcast_object(
        {n: p.data().asnumpy() for n, p in sorted(net.collect_params().items())}, 0)
    state = hvd.elastic.GluonState(params=net.collect_params(), trainer=trainer, epoch=0)
    resets, entries, newest = [], [], {}
    state.register_reset_callbacks([lambda: resets.append(hvd.size())])

    @elastic_run
    def train(state):
        entries.append(state.sync_root)
        if len(entries) == 1:
            assert same(snapshot(net, trainer)[0], rank0_params)
            step(net, trainer, seed=1)
            state.epoch = 1
            state.commit()
            committed = snapshot(net, trainer)
            assert everyone_equal(committed)
            step(net, trainer, seed=2)
            state.epoch = 2
            assert not same(snapshot(net, trainer), committed)
            state.restore()
            assert same(snapshot(net, trainer), committed) and state.epoch == 1
            step(net, trainer, seed=3)
            state.epoch = 3
            state.commit()
            if hvd.rank() == 1:  # a newer commit on rank 1 only, made without collectives
                for p in net.collect_params().values():
                    p.data()[:] += 0.5
                state.epoch = 4
                state.save()
                state._commits += 1  # what commit() counts, without its collective check
                newest["rank1"] = snapshot(net, trainer)
            step(net, trainer, seed=4)  # uncommitted everywhere: undone by restore
            raise PerseusInternalError("simulated loss of a peer")
        got = snapshot(net, trainer)
        step(net, trainer, seed=5)  # still trains after the reset, identically everywhere
        assert everyone_equal(snapshot(net, trainer))
        if trainer._kvstore is not None:
            for name, p in net.collect_params().items():
                stored = trainer._kvstore._store[trainer._param2idx[name]]
                assert np.array_equal(stored.asnumpy(), p.data().asnumpy()), name
        return got

    before = len(RESETS)
    got = train(state)
    assert entries == [0, 1] and resets == [hvd.size()], (entries, resets)
    assert REAL_RESET or len(RESETS) == before + 1, RESETS
    if kind == "distributed":  # after a reset to twice the size, half the gradient scale
        scale = trainer._scale
        state._trainer_size = 2 * hvd.size()
        state.reset()
        assert abs(trainer._scale - 2 * scale) < 1e-12 and state._trainer_size == hvd.size()
        trainer._scale = scale
    assert state.epoch == 4
    assert same(got, hvd.broadcast_object(newest.get("rank1"), 1, name="newest"))


def check_kvstore_state():
    kv = hvd.create("dist_sync_perseus")
    kv.set_optimizer(mx.optimizer.create("sgd", learning_rate=0.5, momentum=0.9))
    state = hvd.elastic.KVStoreState(kv, epoch=0)
    state.init_keys([3, 7], [mx.nd.full((4,), hvd.rank() + 1.0), mx.nd.full((2, 2), 9.0)])
    out = [mx.nd.zeros((4,)), mx.nd.zeros((2, 2))]
    entries = []

    def values():
        kv.pull([3, 7], out=out)
        return [o.asnumpy() for o in out], {k: v.asnumpy() for k, v in kv._updater.states.items()}

    @elastic_run
    def train(state):
        entries.append(state.sync_root)
        if len(entries) == 1:
            assert np.array_equal(values()[0][0], np.full((4,), 1.0))  # rank 0's init
            kv.push([3, 7], [mx.nd.ones((4,)), mx.nd.ones((2, 2))])
            state.epoch = 1
            state.commit()
            committed = values()
            kv.push([3, 7], [mx.nd.ones((4,)) * 2, mx.nd.ones((2, 2))])
            assert not same(values(), committed)
            state.restore()
            assert same(values(), committed) and state.epoch == 1
            # A collective's failure as perseus.mxnet records it and MXNet reports it, when a
            # result is read.
            mpi_ops._record_failure(PeerLostError("simulated loss of rank 1"))
            raise mx.base.MXNetError("allreduce 'kv.push.3': simulated loss of rank 1 "
                                     "(PeerLostError)")
        return values()

    got = train(state)
    assert entries == [0, 0], entries
    assert everyone_equal(got)


def check_kvstore_state_new_worker():
    """A rank whose store has no keys (a new worker) gets them from the sync."""
    kv = hvd.create("dist_sync_perseus")
    state = hvd.elastic.KVStoreState(kv)
    if hvd.rank() == 0:
        state.init_keys("w", mx.nd.arange(6).reshape((2, 3)))

    @elastic_run
    def train(state):
        out = mx.nd.zeros((2, 3))
        kv.pull("w", out=out)
        assert np.array_equal(out.asnumpy(), np.arange(6).reshape((2, 3)))
        kv.pushpull("w", mx.nd.ones((2, 3)), out=out)
        return out.asnumpy()
    assert np.array_equal(train(state), np.full((2, 3), float(hvd.size())))


def main():
    hvd.init()
    checks = [("gluon_distributed_trainer", lambda: check_gluon("distributed")),
              ("gluon_trainer_on_kvstore", lambda: check_gluon("kvstore")),
              ("kvstore_state", check_kvstore_state),
              ("kvstore_state_new_worker", check_kvstore_state_new_worker)]
    run_checks(hvd, checks)


if __name__ == "__main__":
    main()
