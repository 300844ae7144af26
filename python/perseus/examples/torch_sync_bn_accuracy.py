"""What perseus.torch.SyncBatchNorm buys: a small CNN with BatchNorm layers trained on
Fashion-MNIST with tiny per-rank batches, with plain or synchronised batch statistics.

    perseusrun -np 4 python torch_sync_bn_accuracy.py --bn plain
    perseusrun -np 4 python torch_sync_bn_accuracy.py --bn sync      # statistics of all ranks

The twin of mxnet_sync_bn_accuracy.py (same net, same data order, same records; see there).
Every configuration with one --seed sees the same initial weights and the same global batches
(rank r trains on slice r of each global batch); gradients are averaged over all ranks in
both. Only the batch-norm statistics differ: this rank's batch, or the whole global batch.
Test accuracy is measured after each epoch in eval mode (running statistics), each rank on its
shard of the test set, the counts summed.

Data: Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist) or --data-dir.
"""

import argparse
import gzip
import json
import os
import struct
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import perseus.torch as hvd

DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bn", choices=("plain", "sync"), default="sync")
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


def read_idx(folder, stem):
    for name in (stem + ".gz", stem):
        path = os.path.join(folder, name)
        if os.path.exists(path):
            with (gzip.open if name.endswith(".gz") else open)(path, "rb") as f:
                data = f.read()
            ndim = data[3]
            shape = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
            return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)
    raise SystemExit("%s[.gz] not found in %s (install dataset-fashion-mnist, or pass "
                     "--data-dir)" % (stem, folder))


def load(folder, kind, limit):
    images = read_idx(folder, kind + "-images-idx3-ubyte")
    labels = read_idx(folder, kind + "-labels-idx1-ubyte")
    if limit:
        images, labels = images[:limit], labels[:limit]
    x = torch.from_numpy(images.astype(np.float32) / 127.5 - 1.0).unsqueeze(1)
    return x, torch.from_numpy(labels.astype(np.int64))


class Net(nn.Sequential):
    """conv-BN-relu-pool three times, then dense-BN-relu and the classifier (the layers of
    mxnet_sync_bn_accuracy.py's model; conv_bn_only: no BatchNorm after the dense layer)."""

    def __init__(self, width, sync, conv_bn_only=False):
        w = width
        bn2d = hvd.SyncBatchNorm if sync else nn.BatchNorm2d
        bn1d = hvd.SyncBatchNorm if sync else nn.BatchNorm1d
        dense = ([nn.Linear(2 * w * 3 * 3, 64)] if conv_bn_only else
                 [nn.Linear(2 * w * 3 * 3, 64, bias=False), bn1d(64)])
        super().__init__(
            nn.Conv2d(1, w, 3, padding=1, bias=False), bn2d(w), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(w, 2 * w, 3, padding=1, bias=False), bn2d(2 * w), nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(2 * w, 2 * w, 3, padding=1, bias=False), bn2d(2 * w), nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(), *dense, nn.ReLU(),
            nn.Linear(64, 10))


def evaluate(model, images, labels):
    model.eval()
    with torch.no_grad():
        correct = sum(int((model(images[i:i + 500]).argmax(1) == labels[i:i + 500]).sum())
                      for i in range(0, len(images), 500))
    model.train()
    counts = hvd.allreduce(torch.tensor([correct, len(images)], dtype=torch.float64),
                           op=hvd.Sum, name="test_counts")
    return (counts[0] / counts[1]).item()


def main():
    args = parse_args()
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    if size < 2:
        raise SystemExit("run under perseusrun -np N with N >= 2: with one rank both "
                         "configurations are the same")
    torch.manual_seed(args.seed)
    torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "1"))))

    train_x, train_y = load(args.data_dir, "train", args.train_samples)
    test_x, test_y = load(args.data_dir, "t10k", args.test_samples)
    test_x, test_y = test_x[rank::size], test_y[rank::size]

    model = Net(args.width, args.bn == "sync", args.conv_bn_only)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum,
                                weight_decay=1e-4)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)

    global_batch = args.batch_size * size
    steps = len(train_x) // global_batch
    out = open(args.json, "w") if args.json and rank == 0 else None
    for epoch in range(1, args.epochs + 1):
        perm = np.random.RandomState(args.seed * 1000 + epoch).permutation(len(train_x))
        loss_sum = torch.zeros(())
        tic = time.time()
        for step in range(steps):
            start = step * global_batch + rank * args.batch_size
            idx = torch.from_numpy(perm[start:start + args.batch_size])
            optimizer.zero_grad()
            loss = F.cross_entropy(model(train_x[idx]), train_y[idx])
            loss.backward()
            optimizer.step()
            loss_sum += loss.detach()
        train_s = hvd.allreduce(torch.tensor([time.time() - tic]), op=hvd.Max,
                                name="train_time").item()
        loss_mean = hvd.allreduce(loss_sum, name="train_loss").item() / steps
        acc = evaluate(model, test_x, test_y)
        if rank == 0:
            record = dict(framework="torch", bn=args.bn,
                          comm_scope=1 if args.bn == "sync" else None, ranks=size,
                          local_size=hvd.local_size(), conv_bn_only=args.conv_bn_only,
                          batch_per_rank=args.batch_size,
                          seed=args.seed, epoch=epoch, test_accuracy=acc, train_loss=loss_mean,
                          train_seconds=train_s, steps=steps, step_ms=1000.0 * train_s / steps)
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
