#!/usr/bin/env python
"""MXNet Module training in the style of example/image-classification/common/fit.py, with the
Perseus KVStore (the AIACC "Adapt to KVStore APIs" recipe).

    perseusrun -np 2 -H localhost:2 python mxnet_kvstore_fit.py --kv-store dist_sync_perseus
    mpirun -np 2 -hostfile mpi_host.txt ./mxnet_kvstore_config.sh     # the guide's config.sh

The only changes to a fit.py script are marked "Perseus:" below.
"""
import argparse
import logging
import os
import time

import mxnet as mx
import numpy as np

import perseus.mxnet as perseus_kv  # Perseus: registers 'dist_sync_perseus'

from mxnet_mnist import DEFAULT_DATA, load  # same data loader as the Gluon example


def parse_args():
    p = argparse.ArgumentParser(description="fit.py-style Module training")
    p.add_argument("--kv-store", default="dist_sync_perseus")
    p.add_argument("--gpus", default=None, help="e.g. '0'; Perseus binds kv.local_rank itself")
    p.add_argument("--data-dir", default=DEFAULT_DATA)
    p.add_argument("--batch-size", type=int, default=64, help="per-worker batch size")
    p.add_argument("--num-epochs", type=int, default=1)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--mom", type=float, default=0.9)
    p.add_argument("--wd", type=float, default=1e-4)
    p.add_argument("--gc-type", default="none", help="none, 2bit or fp16")
    p.add_argument("--gc-threshold", type=float, default=0.5)
    p.add_argument("--max-train", type=int, default=0, help="use this many images (0: all)")
    p.add_argument("--disp-batches", type=int, default=50)
    return p.parse_args()


def network(num_classes=10):
    data = mx.sym.var("data")
    x = mx.sym.Flatten(data)
    x = mx.sym.FullyConnected(x, num_hidden=128, name="fc1")
    x = mx.sym.Activation(x, act_type="relu")
    x = mx.sym.FullyConnected(x, num_hidden=64, name="fc2")
    x = mx.sym.Activation(x, act_type="relu")
    x = mx.sym.FullyConnected(x, num_hidden=num_classes, name="fc3")
    return mx.sym.SoftmaxOutput(x, name="softmax")


def fit(args, net):
    # kvstore
    # Perseus: kv = mx.kvstore.create(args.kv_store) becomes
    kv = (perseus_kv.create(args.kv_store) if "perseus" in args.kv_store
          else mx.kvstore.create(args.kv_store))
    if args.gc_type != "none":
        kv.set_gradient_compression({"type": args.gc_type, "threshold": args.gc_threshold})
    head = "%(asctime)-15s Node[" + str(kv.rank) + "] %(message)s"
    logging.basicConfig(level=logging.INFO, format=head)

    # Perseus: one process per device, bound by kv.local_rank
    if "perseus" in args.kv_store:
        devs = [mx.gpu(kv.local_rank) if mx.context.num_gpus() > 0 else mx.cpu()]
    elif args.gpus:
        devs = [mx.gpu(int(i)) for i in args.gpus.split(",")]
    else:
        devs = [mx.cpu()]

    images, labels = load(args.data_dir, "train")
    if args.max_train:
        images, labels = images[:args.max_train], labels[:args.max_train]
    # each worker reads its part, as fit.py's iterators do with num_parts/part_index
    images, labels = images[kv.rank::kv.num_workers], labels[kv.rank::kv.num_workers]
    n = (len(images) // args.batch_size) * args.batch_size
    train = mx.io.NDArrayIter(images[:n], labels[:n], args.batch_size, shuffle=True,
                              label_name="softmax_label")
    val_x, val_y = load(args.data_dir, "t10k")
    val = mx.io.NDArrayIter(val_x[:2000], val_y[:2000], 200, label_name="softmax_label")

    model = mx.mod.Module(context=devs, symbol=net)
    # Module multiplies the batch by kv.num_workers for a 'dist..._sync' store, so
    # rescale_grad = 1 / global batch and the summed gradients become an average.
    optimizer_params = {"learning_rate": args.lr, "momentum": args.mom, "wd": args.wd}
    tic = time.time()
    model.fit(train, eval_data=val, num_epoch=args.num_epochs, kvstore=kv, optimizer="sgd",
              optimizer_params=optimizer_params, initializer=mx.init.Xavier(magnitude=2),
              eval_metric="acc",
              batch_end_callback=mx.callback.Speedometer(args.batch_size, args.disp_batches))
    elapsed = time.time() - tic
    score = dict(model.score(val, "acc"))
    if kv.rank == 0:
        print("accuracy: %.4f" % score["accuracy"])
        print("throughput: %.1f images/sec per worker" % (args.num_epochs * n / elapsed),
              flush=True)
    return model


if __name__ == "__main__":
    os.environ.setdefault("MXNET_USE_OPERATOR_TUNING", "0")  # faster start, see docs/mxnet.md
    fit(parse_args(), network())
