#!/usr/bin/env python
"""What PerseusSyncBatchNorm buys: a small Gluon CNN with BatchNorm layers trained on
Fashion-MNIST with tiny per-rank batches, with plain or synchronised batch statistics.

    perseusrun -np 4 python mxnet_sync_bn_accuracy.py --bn plain
    perseusrun -np 4 python mxnet_sync_bn_accuracy.py --bn sync --comm-scope 1   # all ranks
    # SyncBN over the ranks of each host (comm_scope 0): two hosts of two ranks each
    perseusrun -np 4 -H localhost:2,127.0.0.1:2 python mxnet_sync_bn_accuracy.py \\
        --bn sync --comm-scope 0

The experiment is controlled: every configuration with one --seed sees the same initial
weights and the same global batches in the same order (rank r trains on slice r of each
global batch), and the parameter gradients are averaged over all ranks in every case. Only
the group whose samples make up the batch-norm statistics differs: one rank's batch (plain
BatchNorm), this host's ranks (comm_scope 0) or all ranks (comm_scope 1).

Test accuracy is measured after each epoch in inference mode (moving statistics), each rank
on its shard of the test set with its own moving statistics (with plain BatchNorm those
differ between ranks), the counts summed. Rank 0 prints one line per epoch and, with
--json, writes one JSON record per epoch.

Data: Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist) or --data-dir.
"""
import argparse
import json
import os
import time

# MXNet's pip wheels run convolutions through MKLDNN, whose blocked output layout reaches a
# CustomOp (PerseusSyncBatchNorm is one) as wrong memory: garbage or a segfault. Plain
# layouts throughout, for BatchNorm too, so that both configurations run the same kernels.
os.environ.setdefault("MXNET_MKLDNN_ENABLED", "0")
import mxnet as mx  # noqa: E402
import numpy as np  # noqa: E402
from mxnet import autograd, gluon  # noqa: E402

import perseus.mxnet as hvd  # noqa: E402

DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bn", choices=("plain", "sync"), default="sync")
    p.add_argument("--comm-scope", type=int, choices=(0, 1), default=1,
                   help="sync only: 0 the ranks of this host, 1 all ranks")
    p.add_argument("--batch-size", type=int, default=2, help="samples per rank and step")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=0.02,
                   help="SGD learning rate (gradients are the mean over the global batch)")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--width", type=int, default=16, help="channels of the first conv layer")
    p.add_argument("--conv-bn-only", action="store_true",
                   help="no BatchNorm after the dense layer (only the three conv layers')")
    p.add_argument("--train-samples", type=int, default=0,
                   help="train on the first N images of the training set (0: all 60000)")
    p.add_argument("--test-samples", type=int, default=0,
                   help="test on the first N images of the test set (0: all 10000)")
    p.add_argument("--data-dir", default=DEFAULT_DATA)
    p.add_argument("--json", help="rank 0 writes one JSON record per epoch to this file")
    return p.parse_args()


def load(data_dir, kind, limit):
    """(images N x 1 x 28 x 28 float32 in [-1, 1], labels float32) of an MNIST idx pair."""
    import gzip
    import struct

    def read(stem):
        for name in (stem + ".gz", stem):
            path = os.path.join(data_dir, name)
            if os.path.exists(path):
                with (gzip.open if name.endswith(".gz") else open)(path, "rb") as f:
                    return f.read()
        raise SystemExit("%s[.gz] not found in %s (install dataset-fashion-mnist, or pass "
                         "--data-dir)" % (stem, data_dir))

    raw = read("%s-images-idx3-ubyte" % kind)
    n, rows, cols = struct.unpack(">III", raw[4:16])
    images = np.frombuffer(raw, dtype=np.uint8, offset=16).reshape(n, 1, rows, cols)
    labels = np.frombuffer(read("%s-labels-idx1-ubyte" % kind), dtype=np.uint8, offset=8)
    if limit:
        images, labels = images[:limit], labels[:limit]
    return (images.astype(np.float32) / 127.5 - 1.0), labels.astype(np.float32)


def norm_layer(args, channels):
    if args.bn == "plain":
        return gluon.nn.BatchNorm(in_channels=channels)
    return gluon.contrib.nn.PerseusSyncBatchNorm(in_channels=channels,
                                                 comm_scope=args.comm_scope)


def model(args):
    """conv-BN-relu-pool three times, then dense-BN-relu and the classifier: four BatchNorm
    layers, the last one over features with no spatial extent (its statistics come from the
    batch's samples alone; --conv-bn-only leaves it out). Every shape is given, so the
    parameters exist before the first forward and are broadcast untouched (with MKLDNN on,
    an inference forward leaves the convolution weights in a layout broadcast cannot read)."""
    w = args.width
    net = gluon.nn.HybridSequential()
    with net.name_scope():
        net.add(gluon.nn.Conv2D(w, 3, padding=1, use_bias=False, in_channels=1),
                norm_layer(args, w), gluon.nn.Activation("relu"), gluon.nn.MaxPool2D(2),
                gluon.nn.Conv2D(2 * w, 3, padding=1, use_bias=False, in_channels=w),
                norm_layer(args, 2 * w), gluon.nn.Activation("relu"), gluon.nn.MaxPool2D(2),
                gluon.nn.Conv2D(2 * w, 3, padding=1, use_bias=False, in_channels=2 * w),
                norm_layer(args, 2 * w), gluon.nn.Activation("relu"), gluon.nn.MaxPool2D(2),
                gluon.nn.Flatten(),
                gluon.nn.Dense(64, use_bias=args.conv_bn_only, in_units=2 * w * 3 * 3))
        if not args.conv_bn_only:
            net.add(norm_layer(args, 64))
        net.add(gluon.nn.Activation("relu"), gluon.nn.Dense(10, in_units=64))
    return net


def evaluate(net, images, labels, ctx):
    correct = 0
    for i in range(0, len(images), 500):
        pred = net(mx.nd.array(images[i:i + 500], ctx=ctx)).argmax(axis=1).asnumpy()
        correct += int((pred == labels[i:i + 500]).sum())
    counts = hvd.allreduce(mx.nd.array([correct, len(images)], dtype="float64"), op=hvd.Sum,
                           name="test_counts").asnumpy()
    return counts[0] / counts[1]


def main():
    args = parse_args()
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    if size < 2:
        raise SystemExit("run under perseusrun -np N with N >= 2: with one rank every "
                         "configuration is the same")
    ctx = mx.gpu(hvd.local_rank()) if mx.context.num_gpus() > 0 else mx.cpu()
    mx.random.seed(args.seed)
    np.random.seed(args.seed)

    train_x, train_y = load(args.data_dir, "train", args.train_samples)
    test_x, test_y = load(args.data_dir, "t10k", args.test_samples)
    test_x, test_y = test_x[rank::size], test_y[rank::size]

    net = model(args)
    net.initialize(mx.init.Xavier(magnitude=2.0), ctx=ctx)
    net.hybridize()
    params = net.collect_params()
    hvd.broadcast_parameters(params, root_rank=0)
    trainer = hvd.DistributedTrainer(params, "sgd", {"learning_rate": args.lr,
                                                     "momentum": args.momentum, "wd": 1e-4})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

    global_batch = args.batch_size * size
    steps = len(train_x) // global_batch
    out = open(args.json, "w") if args.json and rank == 0 else None
    for epoch in range(1, args.epochs + 1):
        # The same permutation on every rank and in every configuration of this seed.
        perm = np.random.RandomState(args.seed * 1000 + epoch).permutation(len(train_x))
        loss_sum = mx.nd.zeros((1,), ctx=ctx)
        mx.nd.waitall()
        tic = time.time()
        for step in range(steps):
            start = step * global_batch + rank * args.batch_size
            idx = perm[start:start + args.batch_size]
            x = mx.nd.array(train_x[idx], ctx=ctx)
            y = mx.nd.array(train_y[idx], ctx=ctx)
            with autograd.record():
                loss = loss_fn(net(x), y)
            loss.backward()
            trainer.step(args.batch_size)
            loss_sum += loss.sum()
        mx.nd.waitall()
        train_s = time.time() - tic
        # The slowest rank sets the pace; report its time.
        train_s = float(hvd.allreduce(mx.nd.array([train_s]), op=hvd.Max,
                                      name="train_time").asscalar())
        loss_mean = float(hvd.allreduce(loss_sum, name="train_loss").asscalar()) / (
            steps * args.batch_size)
        acc = evaluate(net, test_x, test_y, ctx)
        if rank == 0:
            record = dict(framework="mxnet", bn=args.bn,
                          comm_scope=args.comm_scope if args.bn == "sync" else None,
                          ranks=size, local_size=hvd.local_size(),
                          conv_bn_only=args.conv_bn_only,
                          batch_per_rank=args.batch_size, seed=args.seed, epoch=epoch,
                          test_accuracy=acc, train_loss=loss_mean, train_seconds=train_s,
                          steps=steps, step_ms=1000.0 * train_s / steps)
            print("epoch %d: test accuracy %.4f, train loss %.4f, %.1f s (%.2f ms/step)"
                  % (epoch, acc, loss_mean, train_s, record["step_ms"]), flush=True)
            if out:
                out.write(json.dumps(record) + "\n")
                out.flush()
    if out:
        out.close()
    hvd.shutdown()


if __name__ == "__main__":
    main()
