#!/usr/bin/env python
"""Gluon (Fashion-)MNIST with perseus.mxnet's Horovod API: the AIACC quick start.

    perseusrun -np 2 -H localhost:2 python mxnet_mnist.py
    mpirun -np 2 python mxnet_mnist.py                     # the same, started by Open MPI

Data: Fashion-MNIST from Debian's dataset-fashion-mnist package by default
(/usr/share/datasets/fashion-mnist), or any directory holding the four MNIST idx files
(``--data-dir``, gzipped or not). Each rank trains on its shard; rank 0 draws the progress bar
and prints the test accuracy and the throughput at the end.
"""
import argparse
import gzip
import os
import struct
import sys
import time

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

import perseus.mxnet as hvd

DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data-dir", default=DEFAULT_DATA, help="directory of the MNIST idx files")
    p.add_argument("--batch-size", type=int, default=64, help="per-rank batch size")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--lr", type=float, default=0.01, help="learning rate of one rank (x size)")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--max-batches", type=int, default=0,
                   help="stop each epoch after this many batches (0: the whole shard; for CI)")
    p.add_argument("--max-test", type=int, default=0, help="test on this many images (0: all)")
    p.add_argument("--fp16-allreduce", action="store_true", help="send gradients as float16")
    p.add_argument("--no-progress", action="store_true")
    return p.parse_args()


def _open(data_dir, stem):
    for name in (stem, stem + ".gz"):
        path = os.path.join(data_dir, name)
        if os.path.exists(path):
            return gzip.open(path, "rb") if name.endswith(".gz") else open(path, "rb")
    raise SystemExit("%s not found in %s (install dataset-fashion-mnist, or pass --data-dir)"
                     % (stem, data_dir))


def load(data_dir, kind):
    with _open(data_dir, "%s-labels-idx1-ubyte" % kind) as f:
        _, n = struct.unpack(">II", f.read(8))
        labels = np.frombuffer(f.read(n), dtype=np.uint8).astype(np.float32)
    with _open(data_dir, "%s-images-idx3-ubyte" % kind) as f:
        _, n, rows, cols = struct.unpack(">IIII", f.read(16))
        images = np.frombuffer(f.read(n * rows * cols), dtype=np.uint8)
    images = images.reshape(n, 1, rows, cols).astype(np.float32) / 255.0
    return images, labels


def model():
    net = gluon.nn.HybridSequential()
    with net.name_scope():
        net.add(gluon.nn.Conv2D(20, kernel_size=5, activation="relu"),
                gluon.nn.MaxPool2D(pool_size=2, strides=2),
                gluon.nn.Conv2D(50, kernel_size=5, activation="relu"),
                gluon.nn.MaxPool2D(pool_size=2, strides=2),
                gluon.nn.Flatten(),
                gluon.nn.Dense(256, activation="relu"),
                gluon.nn.Dense(10))
    return net


def progress(done, total, loss, width=30):
    filled = int(width * done / max(total, 1))
    sys.stderr.write("\r[%s%s] %d/%d loss %.4f" % ("=" * filled, "." * (width - filled),
                                                   done, total, loss))
    sys.stderr.flush()


def evaluate(net, images, labels, batch_size, ctx):
    correct = total = 0
    for i in range(0, len(images), batch_size):
        x = mx.nd.array(images[i:i + batch_size], ctx=ctx)
        pred = net(x).argmax(axis=1).asnumpy()
        correct += int((pred == labels[i:i + batch_size]).sum())
        total += len(pred)
    # every rank tested its own shard: sum the counts
    counts = hvd.allreduce(mx.nd.array([correct, total], dtype="float64"), op=hvd.Sum,
                           name="test_counts")
    correct, total = counts.asnumpy()
    return correct / max(total, 1)


def main():
    args = parse_args()
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    ctx = mx.gpu(hvd.local_rank()) if mx.context.num_gpus() > 0 else mx.cpu()

    train_x, train_y = load(args.data_dir, "train")
    test_x, test_y = load(args.data_dir, "t10k")
    if args.max_test:
        test_x, test_y = test_x[:args.max_test], test_y[:args.max_test]
    train_x, train_y = train_x[rank::size], train_y[rank::size]  # this rank's shard
    test_x, test_y = test_x[rank::size], test_y[rank::size]

    net = model()
    net.initialize(mx.init.Xavier(magnitude=2.24), ctx=ctx)
    net.hybridize()
    net(mx.nd.zeros((1, 1, 28, 28), ctx=ctx))  # materialise deferred shapes before broadcast
    params = net.collect_params()
    hvd.broadcast_parameters(params, root_rank=0)

    opt = mx.optimizer.create("sgd", learning_rate=args.lr * size, momentum=args.momentum)
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    trainer = hvd.DistributedTrainer(params, opt, compression=compression)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

    batches = len(train_x) // args.batch_size
    if args.max_batches:
        batches = min(batches, args.max_batches)
    images_done, train_time = 0, 0.0
    for epoch in range(args.epochs):
        perm = np.random.RandomState(epoch * 1000 + rank).permutation(len(train_x))
        tic = time.time()
        loss_value = 0.0
        for b in range(batches):
            idx = perm[b * args.batch_size:(b + 1) * args.batch_size]
            x = mx.nd.array(train_x[idx], ctx=ctx)
            y = mx.nd.array(train_y[idx], ctx=ctx)
            with autograd.record():
                loss = loss_fn(net(x), y)
            loss.backward()
            trainer.step(args.batch_size)
            if rank == 0 and not args.no_progress and (b % 10 == 0 or b == batches - 1):
                loss_value = float(loss.mean().asscalar())
                progress(b + 1, batches, loss_value)
        mx.nd.waitall()
        train_time += time.time() - tic
        images_done += batches * args.batch_size
        if rank == 0 and not args.no_progress:
            sys.stderr.write("\n")
        acc = evaluate(net, test_x, test_y, 256, ctx)
        if rank == 0:
            print("epoch %d: test accuracy %.4f" % (epoch, acc), flush=True)

    throughput = hvd.allreduce(mx.nd.array([images_done / max(train_time, 1e-9)]), op=hvd.Sum,
                               name="throughput").asscalar()
    if rank == 0:
        print("accuracy: %.4f" % acc)
        print("throughput: %.1f images/sec on %d ranks" % (throughput, size), flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
