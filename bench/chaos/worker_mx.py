"""The chaos soak's MXNet worker (soak.py --framework mxnet): worker.py's job over perseus.mxnet,
a small Gluon MLP with hvd.DistributedTrainer and hvd.elastic.GluonState. The same records,
arming and finish rule (chaos_common.py), the boot and reset records included."""

import time

STARTED = time.time()  # before the imports: they are one of the stages the soak times

import os  # noqa: E402
import zlib  # noqa: E402

import mxnet as mx  # noqa: E402
import numpy as np  # noqa: E402
from mxnet import autograd, gluon  # noqa: E402

import perseus.mxnet as hvd  # noqa: E402
from perseus.common import fault_injection  # noqa: E402

from chaos_common import Arming, Recorder, finishing, parse  # noqa: E402

IMPORTED = time.time()


def checksum(params):
    crc = 0
    for _, p in sorted(params.items()):
        crc = zlib.crc32(p.data().asnumpy().tobytes(), crc)
    return crc


def main():
    args = parse()
    hvd.init()
    joined = time.time()
    wid = os.environ["PERSEUS_ELASTIC_WORKER_ID"]
    record = Recorder(args.results, wid)
    arming = Arming(args.results, wid, args.arm_steps)

    mx.random.seed(1 + hvd.rank())  # differs per rank: the first sync makes them equal
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(64, activation="relu", in_units=32),
            gluon.nn.Dense(64, activation="relu", in_units=64), gluon.nn.Dense(8, in_units=64))
    net.initialize(mx.init.Uniform(0.1))
    params = net.collect_params()
    trainer = hvd.DistributedTrainer(params, "sgd", {"learning_rate": 0.01, "momentum": 0.9})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    state = hvd.elastic.GluonState(params=params, trainer=trainer, step=0)
    big = mx.nd.zeros((args.big_elements,))
    record(event="boot", started=STARTED, imported=IMPORTED, joined=joined, pid=os.getpid())
    state.register_reset_callbacks([lambda: record(event="reset")])

    @hvd.elastic.run
    def train(state):
        sums = hvd.allgather(mx.nd.array([checksum(params)], dtype="int64"),
                             name="chaos.checksum").asnumpy()
        record(event="entry", step=state.step, rank=hvd.rank(), size=hvd.size(),
               equal=bool((sums == sums[0]).all()), sync_root=state.sync_root,
               job=os.environ.get("PERSEUS_ELASTIC_JOB_ID"))
        while True:
            arming.tick(record)
            rng = np.random.RandomState(state.step * 1000 + hvd.rank())
            x = mx.nd.array(rng.randn(16, 32))
            y = mx.nd.array(rng.randint(0, 8, 16))
            with autograd.record():
                loss = loss_fn(net(x), y).mean()
            loss.backward()
            trainer.step(1)
            if state.step % 2 == 0:
                hvd.allreduce_(big, name="chaos.big")  # queued on MXNet's engine
                fault_injection.exit_at("allreduce")
                big.wait_to_read()
            finish = hvd.allreduce(mx.nd.array([float(finishing(args, state.step))]),
                                   name="chaos.finish", op=hvd.Sum)
            state.step += 1
            record(event="step", step=state.step, rank=hvd.rank(), size=hvd.size())
            if finish.asscalar():
                return
            if state.step % args.commit_every == 0:
                state.commit()
                record(event="commit", step=state.step)
            time.sleep(args.step_sleep)

    train(state)
    record(event="done", step=state.step, rank=hvd.rank(), size=hvd.size())
    hvd.shutdown()


if __name__ == "__main__":
    main()
