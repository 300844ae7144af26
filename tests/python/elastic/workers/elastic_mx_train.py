"""Deterministic elastic training with perseus.mxnet (test_elastic_training.py), the MXNet twin
of elastic_torch_train.py: a linear softmax classifier on a fixed data set, SGD with momentum,
a commit every other batch and at each epoch's end, in one of two forms:
  --mode gluon:   Gluon parameters, hvd.DistributedTrainer, hvd.elastic.GluonState;
  --mode kvstore: the weights as keys of a Perseus KVStore (perseus.mxnet.create(
                  'dist_sync_perseus')) with the optimizer on the store, gradients pushed and
                  weights pulled each step, hvd.elastic.KVStoreState.
The data are split the way ElasticSampler splits them: each epoch has one order; a step takes
the next BATCH * size() positions of it and rank r every size()-th from position r; the
processed count is part of the state. The same script is the elastic run and the two halves
of its reference (fixed jobs), as in elastic_torch_train.py (--stop-at, --save, --load)."""

import argparse
import os
import pickle
import time

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

import perseus.mxnet as hvd

import elastic_common

BATCH = 4  # per rank
N, FEATURES, CLASSES = 384, 8, 4


def data():
    rng = np.random.RandomState(5)
    return (rng.randn(N, FEATURES).astype(np.float32),
            rng.randint(0, CLASSES, N).astype(np.float32))


def my_share(epoch, processed):
    """This rank's sample indices for the step after `processed` positions of `epoch`."""
    order = np.random.RandomState(2 + epoch).permutation(N)
    width = BATCH * hvd.size()
    chunk = order[processed:processed + width]
    if len(chunk) < width:  # the epoch's last step is padded from its start
        chunk = np.concatenate([chunk, order[:width - len(chunk)]])
    return chunk[hvd.rank()::hvd.size()]


class GluonModel:
    def __init__(self):
        mx.random.seed(1 + hvd.rank())  # differs per rank: the first sync makes it rank 0's
        self.net = gluon.nn.Dense(CLASSES, in_units=FEATURES)
        self.net.initialize(mx.init.Uniform(0.5))
        self.trainer = hvd.DistributedTrainer(self.net.collect_params(), "sgd",
                                              {"learning_rate": 0.1, "momentum": 0.9})
        self.loss = gluon.loss.SoftmaxCrossEntropyLoss()

    def state(self):
        return hvd.elastic.GluonState(params=self.net.collect_params(), trainer=self.trainer,
                                      epoch=0, batch=0, processed=0)

    def step(self, x, y):
        with autograd.record():
            loss = self.loss(self.net(x), y).mean()
        loss.backward()
        self.trainer.step(1)  # the mean over this rank's batch; the trainer averages ranks
        return float(loss.asscalar())

    def weights(self):
        return {n: p.data().asnumpy() for n, p in sorted(self.net.collect_params().items())}

    def dump(self, path):
        self.trainer.save_states(path + ".opt")
        return self.weights()

    def load(self, weights, path):
        for n, p in self.net.collect_params().items():
            mx.nd.array(weights[n]).copyto(p.data())  # in place, as GluonState restores
        self.trainer.load_states(path + ".opt")


class KVStoreModel:
    KEYS = ["w", "b"]

    def __init__(self):
        self.kv = hvd.create("dist_sync_perseus")
        self.kv.set_optimizer(mx.optimizer.create("sgd", learning_rate=0.1, momentum=0.9))
        rng = np.random.RandomState(1 + hvd.rank())  # the first sync makes it rank 0's
        self.initial = [mx.nd.array(rng.uniform(-0.5, 0.5, (CLASSES, FEATURES))),
                        mx.nd.zeros((CLASSES,))]
        self.w, self.b = mx.nd.zeros((CLASSES, FEATURES)), mx.nd.zeros((CLASSES,))
        self.loss = gluon.loss.SoftmaxCrossEntropyLoss()

    def state(self):
        state = hvd.elastic.KVStoreState(self.kv, epoch=0, batch=0, processed=0)
        state.init_keys(self.KEYS, self.initial)
        return state

    def step(self, x, y):
        self.kv.pull(self.KEYS, out=[self.w, self.b])
        self.w.attach_grad()
        self.b.attach_grad()
        with autograd.record():
            loss = self.loss(mx.nd.dot(x, self.w, transpose_b=True) + self.b, y).mean()
            scaled = loss / hvd.size()  # the pushes sum over the ranks: their mean
        scaled.backward()
        self.kv.push(self.KEYS, [self.w.grad, self.b.grad])
        return float(loss.asscalar())

    def weights(self):
        out = [mx.nd.zeros((CLASSES, FEATURES)), mx.nd.zeros((CLASSES,))]
        self.kv.pull(self.KEYS, out=out)
        return {k: o.asnumpy() for k, o in zip(self.KEYS, out)}

    def dump(self, path):
        self.kv.save_optimizer_states(path + ".opt")
        return self.weights()

    def load(self, weights, path):
        self.initial = [mx.nd.array(weights[k]) for k in self.KEYS]
        self.kv.load_optimizer_states(path + ".opt")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--results", required=True)
    p.add_argument("--tag", default="")  # names the job's processes for the leak check
    p.add_argument("--mode", choices=["gluon", "kvstore"], required=True)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--step-sleep", type=float, default=0.05)
    p.add_argument("--stop-at", default="", metavar="EPOCH:BATCH")
    p.add_argument("--save", default="")
    p.add_argument("--load", default="")
    args = p.parse_args()

    hvd.init()
    # A fixed reference job has no worker ids: its records go by rank.
    record = elastic_common.recorder(
        args.results, os.environ.get("PERSEUS_ELASTIC_WORKER_ID") or "rank%d" % hvd.rank(),
        lambda: {"rank": hvd.rank(), "size": hvd.size()})

    X, Y = data()
    model = GluonModel() if args.mode == "gluon" else KVStoreModel()
    loaded = None
    if args.load:
        with open(args.load, "rb") as f:
            loaded = pickle.load(f)
        model.load(loaded["weights"], args.load)
    state = model.state()
    if loaded:
        state.epoch, state.batch, state.processed = (loaded["epoch"], loaded["batch"],
                                                     loaded["processed"])
        state.save()
    state.register_reset_callbacks([lambda: record(event="reset")])

    def committed():
        state.commit()
        record(event="commit", epoch=state.epoch, batch=state.batch)
        if args.stop_at == "%d:%d" % (state.epoch, state.batch):
            if hvd.rank() == 0:
                weights = model.dump(args.save)
                with open(args.save, "wb") as f:
                    pickle.dump({"weights": weights, "epoch": state.epoch,
                                 "batch": state.batch, "processed": state.processed}, f)
            return True
        return False

    @hvd.elastic.run
    def train(state):
        record(event="entry", epoch=state.epoch, batch=state.batch, source=state.sync_root)
        while state.epoch < args.epochs:
            while state.processed < N:
                idx = my_share(state.epoch, state.processed)
                loss = model.step(mx.nd.array(X[idx]), mx.nd.array(Y[idx]))
                state.processed += BATCH * hvd.size()
                state.batch += 1
                record(event="step", epoch=state.epoch, batch=state.batch, loss=loss)
                time.sleep(args.step_sleep)
                if state.batch % 2 == 0 and committed():
                    return
            state.epoch += 1
            state.processed = 0
            if committed():
                return

    train(state)
    weights = [float(v) for _, a in sorted(model.weights().items()) for v in a.flatten()]
    record(event="done", epoch=state.epoch, batch=state.batch, weights=weights)
    hvd.shutdown()


if __name__ == "__main__":
    main()
